"""The package's import layering, read from the source with ``ast`` (nothing is imported).

- No import cycles among adjoint's modules. Every import counts, also one inside
  a function (a lazy import that keeps ``import adjoint`` free of gast still
  makes an edge). Importing one's own ancestor package (``from .. import
  __version__``) is no edge: Python has started that package before any of its
  modules.
- The runtime is a leaf: ``adjoint.runtime`` imports nothing of adjoint but
  itself and ``adjoint.errors`` (generated modules import it where the
  transformer, gast and astor are absent).
- The transformer (frontend, derive, optimize, emit, rules) never imports the layer
  that drives it (api; build's modules, pipeline, generate, cli).
"""
import ast
import importlib.util
import os

import pytest

PACKAGE = "adjoint"
TRANSFORMER = ("frontend", "derive", "optimize", "emit", "rules")
DRIVERS = ("api", "build.modules", "build.pipeline", "build.generate", "build.cli",
           "generate", "cli", "__main__")


def package_modules(root=None):
    """{dotted module name: file path} for every .py file of the package."""
    if root is None:
        root = importlib.util.find_spec(PACKAGE).submodule_search_locations[0]
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, root)
        parts = [PACKAGE] + ([] if rel == "." else rel.split(os.sep))
        for f in files:
            if f.endswith(".py"):
                stem = f[:-3]
                found[".".join(parts if stem == "__init__" else parts + [stem])] = \
                    os.path.join(folder, f)
    return found


def imported(name, path, modules):
    """{(imported module, line)} for every import in the file, resolved to the
    deepest module of the package it names (``from a import b`` names ``a.b``
    when that is a module, else ``a``). Imports from outside the package are left out."""
    is_package = os.path.basename(path) == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    out = set()
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [source] + [f"{source}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t:
                out.add((t, node.lineno))
    return out


def import_graph(modules):
    """{module: {module it imports}}, leaving out imports of the module's own ancestors."""
    graph = {}
    for name, path in modules.items():
        graph[name] = {t for t, _ in imported(name, path, modules)
                       if t != name and not name.startswith(t + ".")}
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state = {}                     # 1: on the current path, 2: finished

    def visit(m, path):
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                cycle = visit(n, path)
                if cycle:
                    return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m, [])
            if cycle:
                return cycle
    return None


def _in(module, package):
    return module == package or module.startswith(package + ".")


def test_no_import_cycles():
    cycle = find_cycle(import_graph(package_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_runtime_imports_only_runtime_and_errors():
    modules = package_modules()
    bad = []
    for name, path in sorted(modules.items()):
        if not _in(name, f"{PACKAGE}.runtime"):
            continue
        for target, line in sorted(imported(name, path, modules)):
            if not (_in(target, f"{PACKAGE}.runtime") or target == f"{PACKAGE}.errors"):
                bad.append(f"{os.path.relpath(path)}:{line}: imports {target}")
    assert not bad, "the runtime must stand alone:\n" + "\n".join(bad)


def test_transformer_does_not_import_the_api():
    modules = package_modules()
    graph = import_graph(modules)
    drivers = [f"{PACKAGE}.{d}" for d in DRIVERS]
    bad = [f"{name} imports {t}" for name in sorted(graph)
           if any(_in(name, f"{PACKAGE}.{p}") for p in TRANSFORMER)
           for t in sorted(graph[name]) if any(_in(t, d) for d in drivers)]
    assert not bad, "\n".join(bad)


# The checks themselves, on small packages written here: each must find what it is for.
def _write_package(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package_modules(str(tmp_path / PACKAGE))


@pytest.mark.parametrize("files, expected", [
    # a lazy import inside a function still closes a cycle
    ({"__init__.py": "", "a.py": "from .b import f\n",
      "b.py": "def f():\n    from .a import g\n"}, ["adjoint.a", "adjoint.b", "adjoint.a"]),
    # through a subpackage, relative two levels up, and `from package import module`
    ({"__init__.py": "", "top.py": "from .sub import low\n", "sub/__init__.py": "",
      "sub/low.py": "from .. import top\n"},
     ["adjoint.sub.low", "adjoint.top", "adjoint.sub.low"]),
    # absolute imports count too
    ({"__init__.py": "", "x.py": "import adjoint.y\n", "y.py": "from adjoint.x import X\n"},
     ["adjoint.x", "adjoint.y", "adjoint.x"]),
    # importing one's own package is no cycle; neither is a chain
    ({"__init__.py": "from .a import f\n", "a.py": "from . import __version__\nfrom .b import g\n",
      "b.py": "import os\n"}, None),
])
def test_find_cycle_finds_cycles(tmp_path, files, expected):
    assert find_cycle(import_graph(_write_package(tmp_path, files))) == expected


def test_runtime_check_sees_imports_of_the_transformer(tmp_path):
    modules = _write_package(tmp_path, {
        "__init__.py": "", "errors.py": "", "api.py": "", "runtime/__init__.py": "",
        "runtime/ok.py": "from ..errors import E\nfrom . import other\n", "runtime/other.py": "",
        "runtime/bad.py": "def f():\n    from .. import api\n"})
    seen = {name: {t for t, _ in imported(name, path, modules)} for name, path in modules.items()}
    assert seen["adjoint.runtime.ok"] == {"adjoint.errors", "adjoint.runtime",
                                          "adjoint.runtime.other"}
    assert "adjoint.api" in seen["adjoint.runtime.bad"]
