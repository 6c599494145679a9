"""Strict applier for the disaggspec SGLang patch series.

Applies every ``*.patch`` of one directory, in name order, to an installed ``sglang`` package tree (the directory that
holds ``sglang/``; by default the one the running interpreter would import, found without importing it). It is
deliberately stricter than ``patch``: each hunk must match its context exactly at the line the hunk header names, so
a patch written against another SGLang build fails instead of landing with fuzz or an offset. Nothing is written
unless every hunk of every patch matches. With ``--record FILE`` it writes the applied series (name and sha256 of each
patch) for the image's label check and for ``disaggspec-sglang-patches``. The image build and the CPU tests both use
this one script, so what the tests prove is what the image ships.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch that does not apply exactly to the tree it was given."""


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: list[str] = field(default_factory=list)  # each starts with ' ', '-' or '+', newline kept


@dataclass
class FilePatch:
    old_path: str | None  # None for a new file
    new_path: str
    hunks: list[Hunk] = field(default_factory=list)


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    # -p1, as the patches are generated with a/ and b/ prefixes.
    return path.split("/", 1)[1] if "/" in path else path


def parse_patch(text: str, name: str) -> list[FilePatch]:
    """Parse a unified diff; anything before the first '--- ' line is the patch's header (its explanation)."""
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = _strip_prefix(line[4:])
            new = _strip_prefix(lines[i + 1][4:])
            if new is None:
                raise PatchError(f"{name}: deleting files is not supported")
            files.append(FilePatch(old, new))
            i += 2
            continue
        m = HUNK_RE.match(line)
        if m:
            if not files:
                raise PatchError(f"{name}: hunk before any file header")
            old_len = int(m.group(2)) if m.group(2) is not None else 1
            new_len = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(int(m.group(1)), old_len, int(m.group(3)), new_len)
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file" applies to the previous line
                    hunk.lines[-1] = hunk.lines[-1].rstrip("\n")
                    i += 1
                    continue
                tag = body[:1]
                if tag not in (" ", "-", "+"):
                    if body in ("\n", ""):  # an editor may have stripped the space of an empty context line
                        body, tag = " \n", " "
                    else:
                        raise PatchError(f"{name}: malformed hunk line {i + 1}: {body!r}")
                if not body.endswith("\n"):
                    body += "\n"
                hunk.lines.append(body)
                seen_old += tag in (" ", "-")
                seen_new += tag in (" ", "+")
                i += 1
            if seen_old != old_len or seen_new != new_len:
                raise PatchError(f"{name}: truncated hunk at line {i}")
            if i < len(lines) and lines[i].startswith("\\"):
                hunk.lines[-1] = hunk.lines[-1].rstrip("\n")
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise PatchError(f"{name}: no file changes found")
    return files


def apply_file_patch(original: list[str], fp: FilePatch, name: str) -> list[str]:
    """Return the patched lines; every hunk must match exactly at its stated line (no offset, no fuzz)."""
    out: list[str] = []
    pos = 0  # index into original
    for h in fp.hunks:
        start = h.old_start - 1 if h.old_len else h.old_start  # a zero-length old range names the line before
        if start < pos:
            raise PatchError(f"{name}: {fp.new_path}: overlapping hunks at line {h.old_start}")
        out.extend(original[pos:start])
        pos = start
        for body in h.lines:
            tag, text = body[0], body[1:]
            if tag == "+":
                out.append(text)
                continue
            if pos >= len(original) or original[pos] != text:
                got = original[pos] if pos < len(original) else "<end of file>"
                raise PatchError(
                    f"{name}: {fp.new_path}: hunk @@ -{h.old_start},{h.old_len} does not match at line {pos + 1}: "
                    f"expected {text!r}, found {got!r} (wrong SGLang version, or already patched?)"
                )
            if tag == " ":
                out.append(text)
            pos += 1
    out.extend(original[pos:])
    return out


def patch_series(patch_dir: Path) -> list[Path]:
    patches = sorted(patch_dir.glob("*.patch"))
    if not patches:
        raise PatchError(f"no *.patch files in {patch_dir}")
    return patches


def apply_series(patch_dir: Path, tree: Path, check_only: bool = False) -> list[tuple[str, str]]:
    """Apply (or with check_only, just verify) the whole series; returns [(name, sha256)]. All or nothing."""
    staged: dict[Path, list[str] | None] = {}  # path -> current content (None: does not exist yet)
    applied: list[tuple[str, str]] = []
    for patch in patch_series(patch_dir):
        raw = patch.read_bytes()
        for fp in parse_patch(raw.decode("utf-8"), patch.name):
            target = tree / fp.new_path
            if target not in staged:
                staged[target] = target.read_text().splitlines(keepends=True) if target.exists() else None
            current = staged[target]
            if fp.old_path is None:
                if current is not None:
                    raise PatchError(f"{patch.name}: {fp.new_path} already exists")
                current = []
            elif current is None:
                raise PatchError(f"{patch.name}: {fp.new_path} not found under {tree}")
            staged[target] = apply_file_patch(current, fp, patch.name)
        applied.append((patch.name, hashlib.sha256(raw).hexdigest()))
    if not check_only:
        for target, content in staged.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(content or []))
            # Stale bytecode would keep running the unpatched module.
            for pyc in target.parent.glob(f"__pycache__/{target.stem}.*.pyc"):
                pyc.unlink()
    return applied


def default_tree() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package without executing it
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("sglang is not installed for this interpreter; pass --tree")
    return Path(next(iter(spec.submodule_search_locations))).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patch_dir", type=Path, help="directory of *.patch files, e.g. patches/0.5.2")
    parser.add_argument("--tree", type=Path, help="directory that contains sglang/ (default: the installed one)")
    parser.add_argument("--check", action="store_true", help="verify that every hunk applies; write nothing")
    parser.add_argument("--record", type=Path, help="write the applied series (name, sha256) to this file")
    parser.add_argument(
        "--version", help="expected sglang version (checked against the tree's dist-info or __version__)"
    )
    args = parser.parse_args(argv)
    try:
        tree = args.tree or default_tree()
        if args.version:
            found = sglang_version(tree)
            if found != args.version:
                raise PatchError(f"tree {tree} has sglang {found}, patches are for {args.version}")
        applied = apply_series(args.patch_dir, tree, check_only=args.check)
    except PatchError as e:
        print(f"apply_patches: FAILED: {e}", file=sys.stderr)
        return 1
    for name, digest in applied:
        print(f"{'ok' if args.check else 'applied'} {name} sha256:{digest}")
    if args.record and not args.check:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"sglang {sglang_version(tree)}"] + [f"{name} sha256:{digest}" for name, digest in applied]
        args.record.write_text("\n".join(lines) + "\n")
    return 0


def sglang_version(tree: Path) -> str:
    """The tree's sglang version: pip's dist-info first, then the package's own version modules."""
    for meta in sorted(tree.glob("sglang-*.dist-info/METADATA")):
        m = re.search(r"^Version: (.+)$", meta.read_text(), re.M)
        if m:
            return m.group(1).strip()
    for candidate in ("_version.py", "version.py"):
        version_file = tree / "sglang" / candidate
        if version_file.exists():
            # Only a top-level literal: 0.5.23's version.py has indented fallbacks such as "0.0.0.dev0".
            m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?[\"']([^\"']+)", version_file.read_text(), re.M)
            if m:
                return m.group(1)
    # An editable install (the upstream images build sglang from a source checkout) has no dist-info beside the
    # package; ask the interpreter's metadata, but only about the tree it would import.
    try:
        if default_tree().resolve() == tree.resolve():
            import importlib.metadata

            return importlib.metadata.version("sglang")
    except Exception:  # "unknown" makes --version fail with a clear message
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
