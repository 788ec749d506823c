"""The release files that `make dist` makes: what the sdist and the wheel carry.

They are built once per module from this checkout (``python -m build``, about 20 s),
into a temporary directory, never into dist/.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.version import Version

import redis_components
from conftest import single_server_only
from redis_components.deprecation import REMOVED_IN

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(
        not (importlib.util.find_spec("build") and importlib.util.find_spec("twine")),
        reason="build or twine is not installed (both are in the dev dependency group)",
    ),
    # Packaging needs no Redis: once per leg, on the single-server pass.
    single_server_only,
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built as `make dist` builds them."""
    outdir = tmp_path_factory.mktemp("dist")
    run = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (sdist,) = outdir.glob("*.tar.gz")
    (wheel,) = outdir.glob("*.whl")
    return sdist, wheel


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def sdist_names(sdist: Path) -> list[str]:
    """The sdist's paths below its top directory (``django_redis_components-<version>/``)."""
    with tarfile.open(sdist) as archive:
        return [name.partition("/")[2] for name in archive.getnames()]


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode())


def test_twine_check_strict_passes(built: tuple[Path, Path]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_wheel_carries_the_package_and_its_license_only(built: tuple[Path, Path]) -> None:
    names = wheel_names(built[1])
    dist_info = f"django_redis_components-{redis_components.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert {name.split("/")[0] for name in names} == {"redis_components", dist_info}


def test_sdist_carries_what_a_packager_needs_to_run_the_tests(built: tuple[Path, Path]) -> None:
    names = sdist_names(built[0])
    for needed in ["LICENSE", "CHANGELOG.md", "README.md", "conftest.py", "manage.py"]:
        assert needed in names
    # What the README points to: make demo and make test, and CONTRIBUTING.md.
    for needed in ["Makefile", "tools/find-python", "CONTRIBUTING.md", "requirements/dev.txt"]:
        assert needed in names
    for folder in ["redis_components/", "tests/", "demo_project/", "docs/"]:
        assert any(name.startswith(folder) for name in names), folder
    # Hatchling always adds the root .gitignore, so it is not checked here.
    for unwanted in ["benchmarks/", "docs/_build/", ".demo-data/", ".venv", "dist/"]:
        assert not any(name.startswith(unwanted) for name in names), unwanted
    assert not any("__pycache__" in name for name in names)


def test_make_dist_installs_only_what_building_takes() -> None:
    """`make dist` installs the dist group (build and twine), not the dev or docs tools."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("$(DIST)/.installed:") : makefile.index("\ndist:")]
    assert "$(DIST_INSTALL)" in recipe
    assert "$(LOCKS)/dist.txt" in recipe  # the locked versions
    [installs] = re.findall(r"^DIST_INSTALL := (.*)$", makefile, re.MULTILINE)
    assert installs == "--group dist"
    assert re.search(r"^dist: \$\(DIST\)/\.installed$", makefile, re.MULTILINE)


@pytest.mark.parametrize(
    ("target", "folder", "installs"),
    [
        ("demo", "DEMO", "-e '.[embedded,hiredis]'"),
        ("docs", "DOCS", "-e '.[embedded]' --group docs"),
    ],
)
def test_make_demo_and_make_docs_install_only_what_they_take(
    target: str, folder: str, installs: str
) -> None:
    """`make demo` gets the app with its bundled server and hiredis, `make docs` the app
    and Sphinx, each in a virtualenv of its own at the dev lock's versions: neither gets
    the suite's, the linters' or the browser's tools."""
    makefile = (ROOT / "Makefile").read_text()
    [found] = re.findall(rf"^{folder}_INSTALL := (.*)$", makefile, re.MULTILINE)
    assert found == installs
    start = makefile.index(f"$({folder})/.installed:")
    recipe = makefile[start : makefile.index("@touch", start)]
    assert f"$({folder}_INSTALL)" in recipe
    assert "$(LOCKS)/dev.txt" in recipe
    assert re.search(rf"^{target}: \$\({folder}\)/\.installed$", makefile, re.MULTILINE)


def test_wheel_version_is_the_package_version(built: tuple[Path, Path]) -> None:
    assert wheel_metadata(built[1])["Version"] == redis_components.__version__


def test_the_version_agrees_with_the_changelog_and_the_docs(built: tuple[Path, Path]) -> None:
    """The unreleased code is a development release of the next version: newer than every
    release in the changelog (under [Unreleased] until it is released), older than the
    one that removes what is deprecated, and the version the docs call the current one."""
    version = Version(wheel_metadata(built[1])["Version"])
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[(.+?)\]", changelog, re.MULTILINE)
    released = [Version(section) for section in sections if section != "Unreleased"]
    assert version > max(released)
    assert version < Version(REMOVED_IN)
    if version.is_prerelease:
        assert sections[0] == "Unreleased"
    else:
        assert Version(sections[0]) == version
    docs = "\n".join(page.read_text() for page in (ROOT / "docs").glob("*.md"))
    changed_in = {Version(found) for found in re.findall(r"Changed in (\d+\.\d+)", docs)}
    assert changed_in
    assert all(found.release <= version.release for found in changed_in)
    upgraded_from = {Version(found) for found in re.findall(r"Upgrading from (\d+\.\d+)", docs)}
    assert upgraded_from
    assert all(found < version for found in upgraded_from)
    # The docs site's title reads the installed package's version.
    assert (
        'importlib.metadata.version("django-redis-components")'
        in (ROOT / "docs" / "conf.py").read_text()
    )
    for text in [changelog, docs, (ROOT / "README.md").read_text()]:
        for wheel in re.findall(r"django_redis_components-([^-<]+)-py3-none-any\.whl", text):
            assert wheel == str(version)


def test_classifiers_name_the_supported_django_and_python_versions(
    built: tuple[Path, Path],
) -> None:
    classifiers = wheel_metadata(built[1]).get_all("Classifier", [])
    for version in ["5.2", "6.0", "6.1"]:
        assert f"Framework :: Django :: {version}" in classifiers
    for version in ["3.10", "3.11", "3.12", "3.13"]:
        assert f"Programming Language :: Python :: {version}" in classifiers
