"""Targets: each backend declared once, as numba's target registry declares its targets.

A ``Target`` is one backend: the runtime module a generated module binds to ``rt`` (its
jit decorators, stacks, launchers and math builtins: runtime/names.py lists what it must
provide), what compiles it, where its arrays go unless told, which target runs its CPU
launches, and the ``Code`` it runs. A ``Code`` is one printed text and its spellings
(decorators, atomics, loop stacks, the thread index, the module header): python and numba
run the same CPU code, bound to either; cuda runs the CUDA code (emit/cuda.py lowers to it).

A new backend that runs an existing code is one ``register(Target(...))`` plus its runtime
module (tests/runtime/test_target_skeleton.py makes one); a new code also needs a lowering in emit/.

Expects: nothing (a leaf: adjoint.generate and the CLI read the code names without
loading the transformer, the runtime reads the targets without the emitter). Guarantees:
``TARGETS`` maps each backend name to its frozen ``Target``, ``CODES`` each code name to
its frozen ``Code``; ``target`` and ``code`` raise a ``ValueError`` naming the choices.
"""
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    """A printed module's text for one kind of machine, and how it spells things."""
    name: str                # ``adjoint generate --target NAME``; ``# adjoint-target: NAME``
    rt_line: str             # the header line binding ``rt`` to a backend module
    host: bool               # grids loop on the host (plans, pass gather, eager, owed zeros)
    func_decorator: str      # a func's functions (and a device code's thread functions)
    kernel_decorator: str = None    # a device code's grid function (host code: by plan)
    numba_names: tuple = ()  # imported from numba
    numba_names_float32: tuple = ()     # the same for a module with a float32 kernel
    atomic: str = None       # the namespace of atomic add/sub/min/max/and_/or_/xor
    thread_index: str = None  # the call giving a device thread its grid index
    local_array: str = None  # fixed-capacity thread stacks; None: growable rt.stack_new_*

    @property
    def named(self):
        """Whether a module's header names it (a CPU module's header predates targets)."""
        return not self.host

    @property
    def fixed_stacks(self):
        """Whether a loop may overflow its stack: a backward then reports it (rt_status)."""
        return self.local_array is not None

    def header(self, float32=False):
        """The module's import lines and its ``rt`` binding."""
        names = self.numba_names_float32 if float32 else self.numba_names
        imports = [f"from numba import {', '.join(names)}", ""] if names else []
        return imports + ["import adjoint.runtime", "", self.rt_line]


@dataclass(frozen=True)
class Target:
    """A backend: ``ad.use_backend(name)``, ``ad.backend_scope(name)``."""
    name: str
    code: Code               # the printed module it runs
    runtime: str             # the module bound to ``rt`` (runtime/names.py ``required``)
    jit: str                 # what compiles the code, in words
    device: str = "cpu"      # where arrays and launches go unless told
    host: str = None         # the target of its CPU launches; None: itself
    compiled: bool = False   # whether it compiles CPU code (numba's typed containers)

    @property
    def cpu(self):
        """The name of the target CPU launches use while this one is in force."""
        return self.name if self.host is None else self.host


CPU = Code("cpu", "rt = adjoint.runtime.backend()  # numba.njit, or plain Python under "
           "ADJOINT_JIT=0", host=True, func_decorator="@rt.jit")
CUDA = Code("cuda", 'rt = adjoint.runtime.backend("cuda")  # numba.cuda (or its simulator)',
            host=False, func_decorator="@cuda.jit(device=True)", kernel_decorator="@cuda.jit",
            numba_names=("cuda", "float64", "int8", "int64"),
            numba_names_float32=("cuda", "float32", "float64", "int8", "int64"),
            atomic="cuda.atomic",
            thread_index="cuda.grid", local_array="cuda.local.array")
CODES = {c.name: c for c in (CPU, CUDA)}

PYTHON = Target("python", CPU, "adjoint.runtime.backend_python", "nothing: plain Python")
NUMBA = Target("numba", CPU, "adjoint.runtime.backend_numba", "numba.njit", compiled=True)
CUDA_TARGET = Target("cuda", CUDA, "adjoint.runtime.backend_cuda",
                     "numba.cuda.jit (or numba's simulator)", device="cuda", host="numba")
TARGETS = {t.name: t for t in (PYTHON, NUMBA, CUDA_TARGET)}


class View(Mapping):
    """A live mapping of each registered backend's name to ``read(its Target)``."""

    def __init__(self, read):
        self.read = read

    def __getitem__(self, name):
        return self.read(TARGETS[name])

    def __iter__(self):
        return iter(TARGETS)

    def __len__(self):
        return len(TARGETS)


def target(name):
    """The registered ``Target`` called ``name``."""
    if name not in TARGETS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


def code(name):
    """The ``Code`` called ``name``."""
    if name not in CODES:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(CODES)}")
    return CODES[name]


def register(t):
    """Add backend ``t`` (a ``Target`` running a code in ``CODES``); returns it."""
    if t.name in TARGETS:
        raise ValueError(f"backend {t.name!r} is already registered")
    if CODES.get(t.code.name) is not t.code:
        raise ValueError(f"backend {t.name!r} runs code {t.code.name!r}, which is not in CODES")
    if t.host is not None and t.host not in TARGETS:
        raise ValueError(f"backend {t.name!r}: its host target {t.host!r} is not registered")
    TARGETS[t.name] = t
    return t


def unregister(name):
    """Remove backend ``name`` (one ``register`` added; the three built in stay)."""
    if name in ("python", "numba", "cuda"):
        raise ValueError(f"backend {name!r} is built in")
    del TARGETS[name]
