"""docs/architecture.md is true of the tree: every file it names exists, its table of
targets is the registry's (adjoint/runtime/targets.py), and tests/ is grouped as it says."""
import pathlib
import re

from adjoint.runtime import targets

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_every_file_named_exists():
    files = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("adjoint/**/*.py")} | \
        {p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/**/*.py")}
    named = set(re.findall(r"`(?:[\w/]+/)?[\w]+\.py`", PAGE))
    assert len(named) > 40
    missing = [n for n in sorted(named)
               if not any(f == n.strip("`") or f.endswith("/" + n.strip("`")) for f in files)]
    assert not missing, f"docs/architecture.md names files that are not in the tree: {missing}"


def test_target_table_is_the_registry():
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| `runtime/(\w+)\.py` \|", PAGE, re.M)
    assert {name: (code, f"adjoint.runtime.{mod}") for name, code, mod in rows} == \
        {t.name: (t.code.name, t.runtime) for t in targets.TARGETS.values()}


def test_tests_are_grouped_as_the_page_says():
    """Every test file is in a folder of tests/ the page names, each folder a package (its
    tests import tests.conftest by that name), and no two test files share a name."""
    folders = set(re.findall(r"`tests/(\w+)/`", PAGE))
    tests = sorted((ROOT / "tests").glob("**/test_*.py"))
    assert len(folders) >= 12
    misplaced = [p.relative_to(ROOT).as_posix() for p in tests
                 if p.parent.parent != ROOT / "tests" or p.parent.name not in folders]
    assert not misplaced, f"test files outside the folders docs/architecture.md names: {misplaced}"
    assert all((ROOT / "tests" / f / "__init__.py").exists() for f in folders)
    names = [p.name for p in tests]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
