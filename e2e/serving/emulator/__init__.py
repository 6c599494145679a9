"""A test double of one SGLang server (prefill, decode or colocated) for the local serving simulation (issue 14).

On the local backend the kwok pods run no containers; the pod runner starts one local process per pool pod, bound to
the pod's loopback IP, with the pod's exact `python3 -m sglang.launch_server ...` arguments. For pool pods that process
is this emulator: `python -m e2e.serving.emulator --sglang-version V --bind IP [--pod-name N] [--emulate k=v ...] --
<sglang args>`. It parses the arguments as that release's parser does (unknown options exit 2), serves that release's
HTTP routes, runs the prefill's bootstrap server and the PD handshake (with the speculative fingerprint of the
project's 0.5.23 patches), exports that release's Prometheus metric names, and generates deterministic, clearly
emulated tokens at a configured rate. The PD router in front of it is the real router package. Nothing here imports
SGLang; every behaviour cites the file:line of the pinned wheel it mirrors (see docs/serving-emulator.md).

Modules: `cli` (entry point), `sglang_args` (SGLang argv), `options` (--emulate), `facts` (per-release routes, metric
names and messages, with citations), `fingerprint`, `textgen` (emulated tokenizer/tokens), `metrics`, `pd` (bootstrap
server, rooms, the decode's handshake), `engine` (request lifecycle and faults), `openai` (response formatting),
`server` (HTTP routes, start-up phases, drain).
"""
