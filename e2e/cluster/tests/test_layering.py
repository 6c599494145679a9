"""The local control plane is the lowest e2e layer: no module of `e2e/cluster` imports the serving simulation
(`e2e.serving`) or the test support (`e2e.support`), at the top of a file or inside a function, so the import circle
through `controlplane.py` (its `down` used to import `e2e.serving.daemon`, which imports `e2e.serving.runner`, which
imports `controlplane`) cannot come back."""

from __future__ import annotations

import ast
from pathlib import Path

CLUSTER = Path(__file__).resolve().parents[1]
HIGHER = ("e2e.serving", "e2e.support")


def imported_modules(tree: ast.AST, package: str = "e2e.cluster") -> list[tuple[int, str]]:
    """(line, module) of every import in `tree` (a module of `package`), nested ones included: `from e2e import
    serving` counts as `e2e.serving`, relative imports are resolved, and `importlib.import_module("...")` or
    `__import__("...")` with a literal name counts too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from . import x` in e2e.cluster is e2e.cluster.x, `from ..serving import x` e2e.serving.x
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def reaches_higher_layer(module: str) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in HIGHER)


def test_the_checker_sees_every_form_of_import() -> None:
    source = "\n".join(
        [
            "import e2e.serving.daemon",
            "from e2e import support",
            "def f():",
            "    from e2e.serving.daemon import stop_runner",
            "from ..serving import runner",
            "from . import processes",
            "importlib.import_module('e2e.support.kube')",
            "print('python -m e2e.serving start')",
        ]
    )
    hits = [line for line, module in imported_modules(ast.parse(source)) if reaches_higher_layer(module)]
    assert sorted(set(hits)) == [1, 2, 4, 5, 7]
    assert not reaches_higher_layer("e2e.servingdir") and not reaches_higher_layer("e2e.cluster.servingdir")


def test_cluster_modules_import_neither_serving_nor_support() -> None:
    sources = sorted(CLUSTER.glob("*.py"))
    assert {path.name for path in sources} >= {"controlplane.py", "processes.py", "servingdir.py"}
    offending = [
        f"{path.name}:{line}: {module}"
        for path in sources
        for line, module in imported_modules(ast.parse(path.read_text(), filename=str(path)))
        if reaches_higher_layer(module)
    ]
    assert offending == [], "e2e/cluster must not depend on the layers above it:\n" + "\n".join(offending)
