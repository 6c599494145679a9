"""The generators' shared helpers: the repository root is found by its files, not by a directory depth."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.common import repo_root, write_or_check


def test_repo_root_is_this_checkout() -> None:
    root = repo_root()
    assert (root / "pyproject.toml").is_file() and (root / "operator" / "tools" / "common.py").is_file()
    assert repo_root(Path(__file__)) == root


def test_repo_root_outside_a_checkout_fails(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")  # a pyproject.toml alone is not this repository
    with pytest.raises(RuntimeError, match="no repository root"):
        repo_root(tmp_path / "operator" / "tools" / "crd.py")


def test_write_or_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wanted = {Path("a/b.txt"): "new\n"}
    assert write_or_check(tmp_path, wanted, check=True) == 1
    assert "+new" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert write_or_check(tmp_path, wanted, check=False) == 0
    assert (tmp_path / "a/b.txt").read_text() == "new\n"
    assert write_or_check(tmp_path, wanted, check=True) == 0
    assert "wrote a/b.txt" in capsys.readouterr().out
