"""Running other projects' own test suites against our code.

Their tests come from their published source distributions, downloaded at test time
into ``.peer-suites/`` (nothing of theirs is in this repository), and run in a pytest
subprocess with adapters of ours. Their assertions are theirs: each test must pass, or
be listed as not applicable with the reason why.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from conftest import missing
from tests.processes import ROOT

CACHE = ROOT / ".peer-suites"


def unpack(dist: str, version: str, paths: Mapping[str, str]) -> Path:
    """Unpack from ``dist==version``'s source distribution (downloaded once) the files
    under each of ``paths`` (a file or folder after the archive's top folder -> where it
    goes under the returned folder). Skips, saying why, when the download fails. Legs
    that run at once take turns (a lock file), so none reads another's half-written
    archive."""
    CACHE.mkdir(exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _unpack(dist, version, paths)


def _unpack(dist: str, version: str, paths: Mapping[str, str]) -> Path:
    target = CACHE / f"{dist}-{version}"
    done = target / ".unpacked"
    if done.exists() and set(done.read_text().splitlines()) >= set(paths):
        return target
    download = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"),
            *(f"{dist}=={version}", "--dest", str(CACHE), "--quiet"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    stem = f"{dist}-{version}.tar.gz".lower().replace("-", "_")
    archives = [p for p in CACHE.glob("*.tar.gz") if p.name.lower().replace("-", "_") == stem]
    if download.returncode != 0 or not archives:
        missing(
            f"{dist} {version}'s source distribution could not be downloaded, so its own "
            f"tests were not run: {download.stderr.strip()[-500:]}"
        )
    with tarfile.open(archives[0]) as archive:
        members = []
        for member in archive.getmembers():
            inner = member.name.split("/", 1)[-1]
            for source, destination in paths.items():
                if member.isfile() and (inner == source or inner.startswith(source + "/")):
                    member.name = destination + inner[len(source) :]
                    members.append(member)
        archive.extractall(target, members=members, filter="data")
    done.write_text("\n".join(paths))
    return target


def run_suite(
    paths: list[Path],
    report: Path,
    env: Mapping[str, str],
    options: tuple[str, ...] = (),
) -> tuple[dict[str, str], str]:
    """Run pytest on ``paths`` in a subprocess; each test's outcome (passed, failed or
    skipped) by ``module.Class.test``, and the output."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", *map(str, paths), *options),
            *("-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml")),
            *("--rootdir", str(paths[0].parent), "--junitxml", str(report), "-q", "--no-cov"),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert report.exists(), output
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[name] = "failed" if failed else "skipped" if case.find("skipped") else "passed"
    return outcomes, output


def check(
    title: str,
    outcomes: Mapping[str, str],
    not_applicable: Mapping[str, str],
    output: str,
    at_least: int,
) -> None:
    """Every test passed or is listed (and every listed one that ran still fails); say so.

    A listed name is a test's full name, or its name without parameters (then it stands
    for all of them). A listed test that did not run at all is one that an older version
    of the suite lacks (the list covers every version we support): it is fine, and named
    in the summary; one that ran and passed (or was skipped) must leave the list."""

    def listed(name: str) -> str | None:
        return name if name in not_applicable else (name.split("[")[0] if "[" in name else None)

    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    unexpected = {name for name in failed if listed(name) not in not_applicable}
    assert not unexpected, f"{title}: failed on our code: {sorted(unexpected)}\n{output[-8000:]}"
    ran = {listed(name) for name in outcomes}
    absent = set(not_applicable) - ran
    stale = set(not_applicable) - absent - {listed(name) for name in failed}
    assert not stale, f"listed as not applicable, yet they ran without failing: {sorted(stale)}"
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    assert passed >= at_least, outcomes  # the suite ran, not just collected
    reasons = sorted({(str(listed(name)), not_applicable[str(listed(name))]) for name in failed})
    print(
        f"\n{title}: {passed} passed, {len(failed)} not applicable:\n"
        + "\n".join(f"  {name}: {why}" for name, why in reasons)
        + (f"\nlisted, not in this version's suite: {sorted(absent)}" if absent else "")
    )
