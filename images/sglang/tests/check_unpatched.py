"""Check a test run against the *unpatched* sglang wheel: the listed tests must fail, for the listed reason.

``run.sh`` runs the suite against the pristine wheel with a JUnit report, then calls this with the report and
``expected-unpatched-failures-<version>.txt`` (lines of ``<module>::<test id><TAB><text the failure must contain>``).
Every listed test must have failed or errored with that text in its message, so a test cannot "detect the bug" by
crashing in its own harness; every other test that ran for this version must have passed, so nothing unexpected is
hiding among the failures. Exit status 0 only if both hold.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def load_results(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, message) with outcome one of passed, failed, skipped."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message += (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                outcome = "skipped"
        results[test_id] = (outcome, message)
    return results


def load_expected(path: Path) -> dict[str, str]:
    expected: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test_id, _, reason = line.partition("\t")
        expected[test_id.strip()] = reason.strip()
    return expected


def main(report: Path, expected_file: Path) -> int:
    results = load_results(report)
    expected = load_expected(expected_file)
    problems: list[str] = []
    for test_id, reason in expected.items():
        if test_id not in results:
            problems.append(f"{test_id}: listed as failing unpatched, but it did not run")
            continue
        outcome, message = results[test_id]
        if outcome != "failed":
            problems.append(f"{test_id}: must fail on the unpatched wheel, but {outcome}")
        elif reason not in message:
            problems.append(f"{test_id}: failed, but not with {reason!r}: {message.strip().splitlines()[:1]}")
    ran = {t: r for t, r in results.items() if r[0] != "skipped"}
    for test_id, (outcome, message) in ran.items():
        if test_id not in expected and outcome != "passed":
            problems.append(f"{test_id}: not listed as failing unpatched, but failed: {message.strip()[:200]}")
    for p in problems:
        print(f"check_unpatched: {p}", file=sys.stderr)
    if problems:
        return 1
    print(
        f"check_unpatched: unpatched wheel: {len(expected)} tests detect the bugs (failed as listed), "
        f"{len(ran) - len(expected)} others unaffected"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
