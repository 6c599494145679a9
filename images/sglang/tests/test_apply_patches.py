"""The strict applier the image build runs: exact hunks apply, anything that would need an offset or fuzz does not.

Independent of the sglang tree under test (it patches small files it writes itself), so it runs in every pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import apply_patches

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 21))
PATCH = """header: what and why

--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -9,3 +9,4 @@
 line 9
 line 10
+inserted
 line 11
"""


def tree_with(tmp_path: Path, content: str) -> tuple[Path, Path]:
    tree, patches = tmp_path / "tree", tmp_path / "patches"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text(content)
    patches.mkdir()
    (patches / "0001-x.patch").write_text(PATCH)
    return tree, patches


def test_exact_hunk_applies(tmp_path):
    tree, patches = tree_with(tmp_path, ORIGINAL)
    applied = apply_patches.apply_series(patches, tree)
    assert [name for name, _ in applied] == ["0001-x.patch"]
    assert (tree / "pkg" / "mod.py").read_text() == ORIGINAL.replace("line 10\n", "line 10\ninserted\n")


@pytest.mark.parametrize(
    "content, why",
    [
        ("extra\n" + ORIGINAL, "offset"),  # same context one line lower: patch(1) would apply it with an offset
        (ORIGINAL.replace("line 9\n", "line nine\n"), "fuzz"),  # one context line differs: fuzz 1 would apply it
        (ORIGINAL.replace("line 10\n", "line 10\ninserted\n"), "already applied"),
    ],
)
def test_inexact_hunk_is_refused_and_nothing_is_written(tmp_path, content, why):
    tree, patches = tree_with(tmp_path, content)
    (patches / "0000-ok.patch").write_text("--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+new\n")
    with pytest.raises(apply_patches.PatchError, match="does not match"):
        apply_patches.apply_series(patches, tree)
    assert (tree / "pkg" / "mod.py").read_text() == content, why
    assert not (tree / "pkg" / "new.py").exists(), "a failed series must write nothing"
