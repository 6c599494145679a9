"""Build-time generators of the committed files (`make generate` writes them, `make verify` checks them).

Not part of the operator: the wheel and the operator image ship only `disaggspec` (pyproject's package find includes
`disaggspec*`, and the image copies only `operator/disaggspec/`). Run a generator from the repository root with
`PYTHONPATH=operator python -m tools.<name> [--check]`:

- `tools.crd`: the CRD YAML in `crds/` and the chart's identical copy.
- `tools.docs`: `docs/reference/` (API, validation rules, conditions) and README's short API summary.
- `tools.flags`: `operator/disaggspec/sglang/_flags_<version>.py` from the pinned wheel's real server-args parser;
  it runs inside that version's SGLang test venv, so call it through `images/sglang/flags.sh generate|check`.
"""
