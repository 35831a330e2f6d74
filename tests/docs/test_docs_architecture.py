"""docs/architecture.md is true of the tree: every file it names exists, and its table of
targets is the registry's (adjoint/runtime/targets.py)."""
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
