"""A random program: funcs, kernels, arrays, and a schedule of launches and copies on one tape.

``gen_program(seed, profile)`` is deterministic in ``seed``. All kernels of a
program share one grid; grid-shaped float arrays flow from one launch to the
next (a later kernel reads what an earlier one stored), accumulators of
``bins`` elements become gather sources of later kernels, and between launches
arrays are overwritten (a launch writing an array an earlier launch read,
``ad.copy``, ``Array.assign``): the tape must keep what the earlier launch saw.
One array is sometimes passed for several read parameters of one launch.

The loss is ``sum(w * final value)`` over every array a step wrote (``seeded``);
the gradients checked are those of the ``leaf`` arrays (the random inputs).

A ``Profile.vectors`` share of programs use vector types (drawn from a random
source of their own, so the other programs are the ones drawn before vectors
existed): their kernels read and write arrays of vec3 (``dtype`` "vec3", of shape
grid + (3,) or (bins, 3)), all of them use vec3 locals, some mat33 and quat ones,
and vector funcs join the scalar ones.

A ``Profile.extras`` share of programs (0 by default; drawn from a random source of
their own too, so a profile without extras draws exactly the programs drawn before
they existed) are drawn with extras: ``math.asinh/acosh/atanh/hypot/fmod`` and
``math.isnan/isinf/isfinite`` in their expressions and conditions, and funcs with
defaulted parameters called with keyword arguments or without the defaulted ones
(gen_expr, gen_func).

A ``Profile.stores`` share of kernels (0.15 by default; drawn from a random source of
their own per kernel, so with ``stores`` 0 every program is the one drawn before the
option existed) also store one element several times (gen_kernel.s_stores: the shapes
pass scale got wrong before 09b4cd3, issue 37), and the same share of programs seed some
of their leaves, arrays only read, in the tape's backward (``Program.read_seeds``).
"""
import ast
import math
import random
import re
from dataclasses import dataclass, field

import numpy as np

from .gen_func import gen_funcs, gen_vec_funcs
from .gen_kernel import gen_kernel

HEADER = "import math\n\nimport numpy as np\n\nimport adjoint as ad\n"
BIG_GRIDS = [(2100,), (2600,), (48, 48), (6, 400), (40, 64), (64, 40), (8, 300)]


@dataclass
class Profile:
    """How programs are drawn: ``big`` is the chance of a grid above the parallel threshold;
    numba compiles each kernel for seconds, so programs are kept small by default."""
    big: float = 0.25
    max_kernels: int = 2
    statements: tuple = (2, 6)      # top-level statements of a kernel body
    vectors: float = 0.3            # chance of a program with vec3 (mat33, quat) code
    extras: float = 0.0             # chance of a program with the extras (_extras)
    losses: float = 0.0             # chance that a kernel's one output is a one-element total
                                    # (a tape's loss: adjoint/runtime/eager.py; _loss_only)
    stores: float = 0.15            # chance that a kernel stores one element several times
                                    # (gen_kernel.s_stores), and that a program seeds leaves
                                    # (arrays only read) in its backward (_read_seeds)


@dataclass
class ArrayDecl:
    name: str
    shape: tuple
    kind: str          # leaf (random float input), index (ints in [0, high)), perm, buffer
    high: int = 0
    clone_of: str = ""  # buffers made by ad.clone at a step start there, not as zeros
    dtype: str = ""     # "vec3": an array of vectors (its shape ends in 3); "": floats or ints


@dataclass
class Step:
    op: str                                    # launch, copy, assign, clone
    kernel: str = ""
    args: list = field(default_factory=list)   # launch: per parameter, an array name or a number
    dest: str = ""
    src: str = ""


@dataclass
class Program:
    seed: int
    grid: tuple
    bins: int
    arrays: dict
    funcs: list
    kernels: list
    steps: list
    features: list = field(default_factory=list)
    segment: tuple = None   # (start, stop): the steps a -ckpt backend checkpoints (ckpt.py)
    read_seeds: tuple = ()  # leaves (only read) whose values enter the loss too: their
                            # gradients start at a seed, not at zero (Profile.stores)

    @property
    def threads(self):
        return math.prod(self.grid)

    @property
    def dim(self):
        return self.grid[0] if len(self.grid) == 1 else self.grid

    def leaves(self):
        return [n for n, a in self.arrays.items() if a.kind == "leaf"]

    def seeded(self):
        """Arrays whose final values enter the loss: every array a step wrote, and the
        leaves of ``read_seeds`` (the tape's backward is seeded on them too)."""
        written = []
        for s in self.steps:
            names = [s.dest] if s.op != "launch" else \
                [a for p, a in zip(self.kernel(s.kernel).params, s.args) if p.is_output]
            written += [n for n in names if n not in written]
        return written + [n for n in self.read_seeds if n in self.arrays and n not in written]

    def kernel(self, name):
        return next(k for k in self.kernels if k.name == name)

    def source(self):
        return "\n\n".join([HEADER] + self.funcs + [k.source for k in self.kernels])

    def schedule(self):
        """The launches and copies as Python (for reproducers)."""
        lines = []
        for s in self.steps:
            if s.op == "launch":
                k = self.kernel(s.kernel)
                ins = [str(a) for p, a in zip(k.params, s.args) if not p.is_output]
                outs = [str(a) for p, a in zip(k.params, s.args) if p.is_output]
                lines.append(f"ad.launch({s.kernel}, {self.dim!r}, inputs=[{', '.join(ins)}], "
                             f"outputs=[{', '.join(outs)}])")
            elif s.op == "clone":
                lines.append(f"{s.dest} = ad.clone({s.src})")
            elif s.op == "copy":
                lines.append(f"ad.copy({s.dest}, {s.src})")
            else:
                lines.append(f"{s.dest}.assign({s.src})")
        return lines


def program_data(prog):
    """Initial values of the arrays (``clone`` ones excepted) and the loss weights."""
    rng = np.random.default_rng(prog.seed)
    data = {}
    for name, a in prog.arrays.items():
        if a.kind == "leaf":
            data[name] = rng.uniform(-1.0, 1.0, a.shape)
        elif a.kind == "index":
            data[name] = rng.integers(0, a.high, a.shape).astype(np.int32)
        elif a.kind == "perm":
            data[name] = rng.permutation(a.shape[0]).astype(np.int32)
        elif not a.clone_of:
            data[name] = np.zeros(a.shape)
    weights = {n: rng.uniform(0.5, 1.5, prog.arrays[n].shape) for n in prog.seeded()}
    return data, weights


# --------------------------------------------------------------------------- drawing

class _Builder:
    """Arrays and steps of a program being drawn."""

    def __init__(self, rng, grid, bins):
        self.rng, self.grid, self.bins = rng, grid, bins
        self.arrays, self.steps = {}, []
        self.read = set()           # arrays some launch has read (overwriting them is recorded)

    def new(self, prefix, shape, kind, **kw):
        name = f"{prefix}{sum(n.startswith(prefix) for n in self.arrays)}"
        self.arrays[name] = ArrayDecl(name, shape, kind, **kw)
        return name

    def of_shape(self, shape, kinds=("leaf", "buffer"), dtype=""):
        return [n for n, a in self.arrays.items()
                if a.shape == shape and a.kind in kinds and a.dtype == dtype]

    def readable(self, shape, prefix, dtype=""):
        """An array of ``shape`` to read: often one a step wrote, else a leaf."""
        written = self.of_shape(shape, ("buffer",), dtype)
        if written and self.rng.random() < 0.5:
            return self.rng.choice(written)
        names = self.of_shape(shape, dtype=dtype)
        return self.rng.choice(names) if names else self.new(prefix, shape, "leaf", dtype=dtype)

    def bind_input(self, p, bound):
        if p.kind == "in":
            if bound and self.rng.random() < 0.3:
                grid_in = [a for a in bound if isinstance(a, str) and
                           self.arrays[a].shape == self.grid and self.arrays[a].kind != "index"]
                if grid_in:
                    return self.rng.choice(grid_in)      # one array, several read parameters
            return self.readable(self.grid, "a")
        if p.kind == "src":
            return self.readable((self.bins,), "g")
        if p.kind == "vin":
            return self.readable(self.grid + (3,), "p", "vec3")
        if p.kind == "idx":
            names = self.of_shape(self.grid, ("index",))
            return names[0] if names and self.rng.random() < 0.5 else \
                self.new("idx", self.grid, "index", high=self.bins)
        if p.kind == "perm":
            names = self.of_shape((self.grid[0],), ("perm",))
            return names[0] if names else self.new("perm", (self.grid[0],), "perm")
        if p.kind == "n":
            return self.rng.randint(0, 4)
        return round(self.rng.uniform(-1.0, 1.0), 3)

    def bind_output(self, p, taken):
        shape = {"out": self.grid, "acc": (self.bins,), "tot": (1,),
                 "vout": self.grid + (3,), "vacc": (self.bins, 3)}[p.kind]
        dtype = "vec3" if p.kind in ("vout", "vacc") else ""
        reuse = [n for n in self.of_shape(shape, ("buffer",), dtype) if n not in taken]
        if reuse and self.rng.random() < 0.35:
            return self.rng.choice(reuse)                # overwrite (or accumulate onto) it
        if p.kind in ("out", "vout") and self.rng.random() < 0.3:
            src = self.readable(shape, "a" if p.kind == "out" else "p", dtype)
            dest = self.new("b", shape, "buffer", clone_of=src, dtype=dtype)
            self.steps.append(Step("clone", dest=dest, src=src))
            return dest
        return self.new("b", shape, "buffer", dtype=dtype)

    def launch(self, kdef):
        args = []
        for p in kdef.params:
            if not p.is_output:
                args.append(self.bind_input(p, args))
        for p in kdef.params:
            if p.is_output:
                args.append(self.bind_output(p, set(a for a in args if isinstance(a, str))))
        self.read.update(a for p, a in zip(kdef.params, args) if not p.is_output and isinstance(a, str))
        self.steps.append(Step("launch", kernel=kdef.name, args=args))

    def overwrite(self):
        """``ad.copy`` or ``assign`` into a buffer an earlier launch read."""
        targets = [n for n in self.read if self.arrays[n].kind == "buffer"]
        if not targets:
            return
        dest = self.rng.choice(sorted(targets))
        sources = [n for n in self.of_shape(self.arrays[dest].shape, dtype=self.arrays[dest].dtype)
                   if n != dest]
        if sources:
            self.steps.append(Step(self.rng.choice(["copy", "assign"]), dest=dest,
                                   src=self.rng.choice(sources)))


def _grid(rng, profile):
    if rng.random() < profile.big:
        return rng.choice(BIG_GRIDS)
    if rng.random() < 0.5:
        return (rng.randint(5, 24),)
    return (rng.randint(3, 7), rng.randint(3, 9))


def gen_program(seed, profile=Profile()):
    rng = random.Random(seed)
    grid = _grid(rng, profile)
    bins = rng.randint(3, 11)
    threads = math.prod(grid)
    scales = {"acc": round(bins / threads, 6), "tot": round(1.0 / threads, 8)}
    extras = _extras(seed, profile)
    sigs, func_sources = gen_funcs(rng, extras)
    vectors = _vectors(seed, profile)
    if vectors:
        func_sources += gen_vec_funcs(rng, sigs, vectors, len(sigs), extras)
    b = _Builder(rng, grid, bins)
    for _ in range(rng.randint(1, 3)):
        b.new("a", grid, "leaf")
    kernels = []
    for k in range(rng.randint(1, profile.max_kernels)):
        kinds = vectors and frozenset(["vec3"] + [v for v in ("mat33", "quat")
                                                  if rng.random() < 0.4])
        kdef = gen_kernel(rng, f"k{k}", len(grid), sigs, scales, profile.statements, kinds,
                          extras, _loss_only(seed, k, profile), _stores(seed, k, profile))
        kernels.append(kdef)
        for _ in range(2 if rng.random() < 0.3 else 1):
            if rng.random() < 0.4:
                b.overwrite()
            b.launch(kdef)
    if rng.random() < 0.5:
        b.overwrite()
    prog = Program(seed, grid, bins, b.arrays, func_sources, kernels, b.steps,
                   read_seeds=_read_seeds(seed, _leaves(b.arrays), profile))
    prog.features = features(prog)
    return prog


def _leaves(arrays):
    return [n for n, a in arrays.items() if a.kind == "leaf"]


def _stores(seed, k, profile):
    """Whether kernel ``k`` of the program of ``seed`` stores one element several times
    (gen_kernel.s_stores), from a random source of its own (programs drawn with ``stores``
    0 are drawn as before the option existed)."""
    return random.Random(f"stores {seed} {k}").random() < profile.stores


def _read_seeds(seed, leaves, profile):
    """The leaves whose values enter the loss (their tape seeds make their gradients
    start at the seed: a backward that took them for clean would overwrite it), drawn
    with chance ``profile.stores`` from a random source of its own."""
    rng = random.Random(f"stores {seed}")
    if rng.random() >= profile.stores or not leaves:
        return ()
    picked = tuple(n for n in leaves if rng.random() < 0.5)
    return picked or (rng.choice(leaves),)


def _loss_only(seed, k, profile):
    """Whether kernel ``k`` of the program of ``seed`` writes one one-element total and
    nothing else (a loss: on numba its taped launch runs its VJP at once), from a random
    source of its own (programs drawn with ``losses`` 0 are drawn as before)."""
    return random.Random(f"losses {seed} {k}").random() < profile.losses


def _vectors(seed, profile):
    """The vector kinds of a program (none, or all three for its funcs; each kernel
    takes vec3 and some of the others), from a random source of its own."""
    if random.Random(f"vectors {seed}").random() < profile.vectors:
        return frozenset(["vec3", "mat33", "quat"])
    return frozenset()


def _extras(seed, profile):
    """Whether the program of ``seed`` is drawn with extras (math.asinh ... math.fmod,
    math.isnan/isinf/isfinite, defaulted func parameters and keyword calls), from a
    random source of its own."""
    return random.Random(f"extras {seed}").random() < profile.extras


CONSTRUCTS = {"while": "while ", "for": "for ", "break": "break", "continue": "continue",
              "func": "@ad.func\n", "func_grad": "@ad.func_grad", "return-value": "return ",
              "ternary": " else ", "min/max": "min(", "clamp": "clamp(", "abs": "abs(",
              "swap": "), (",
              "vec3": "ad.vec3", "vec3-array": "dtype=ad.vec3", "mat33": "ad.mat33(",
              "quat": "ad.quat", "dot": "ad.dot(", "cross": "ad.cross(", "length": "ad.length(",
              "normalize": "ad.normalize(", "matmul": " @ ", "transpose": "ad.transpose(",
              "quat_rotate": "ad.quat_rotate",
              "asinh": "asinh(", "acosh": "acosh(", "atanh": "atanh(", "hypot": "hypot(",
              "fmod": "fmod(", "isnan": "isnan(", "isinf": "isinf(", "isfinite": "isfinite("}


def features(prog):
    """Which constructs a program holds (for coverage counts and reproducers)."""
    text = prog.source()
    found = {f for k in prog.kernels for f in k.features}
    found |= {name for name, needle in CONSTRUCTS.items() if needle in text}
    if any(f.split("@ad.func_grad")[0].count("return ") > 1 for f in prog.funcs):
        found.add("early-return")
    found -= {"swap"} if not re.search(r"^\s+\w+, \w+ = \w+, \w+$", text, re.M) else set()
    if re.search(r"^\s+[uMw]\w*(\.[xyz]|\[\d(, \d)?\]) [-+*]?= ", text, re.M):
        found.add("component-set")
    if re.search(r"^\s+for (k\d+) in range\(.*\):\n\s+\w+\[\1\]", text, re.M):
        found.add("component-loop")
    if any("ad.vec3" in f.split("\n")[1] for f in prog.funcs):
        found.add("vec3-func")
    for s in prog.steps:
        if s.op != "launch":
            found.add(s.op)
            continue
        params = prog.kernel(s.kernel).params
        reads = [a for p, a in zip(params, s.args) if not p.is_output and isinstance(a, str)]
        if len(reads) != len(set(reads)):
            found.add("one-array-several-params")
    read = set()
    for s in prog.steps:
        written = [s.dest] if s.op != "launch" else \
            [a for p, a in zip(prog.kernel(s.kernel).params, s.args) if p.is_output]
        if read & set(written) and s.op != "clone":
            found.add("overwrite-after-read")
        if s.op == "launch":
            read |= {a for p, a in zip(prog.kernel(s.kernel).params, s.args)
                     if not p.is_output and isinstance(a, str)}
    if re.search(r": (float|int) = ", text):
        found.add("default-param")
        found |= _calls(prog)
    if prog.threads > 2048:
        found.add("big-grid")
    if prog.read_seeds:
        found.add("read-seed")
    if len([s for s in prog.steps if s.op == "launch"]) > 1:
        found.add("multi-launch")
    return sorted(found)


def _calls(prog):
    """``keyword-arg``, ``keyword-reordered`` and ``default-omitted``: how the program's
    calls of its funcs pass their arguments."""
    tree = ast.parse(prog.source())
    params = {f.name: [a.arg for a in f.args.args] for f in tree.body
              if isinstance(f, ast.FunctionDef)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in params:
            names = params[node.func.id]
            if node.keywords:
                found.add("keyword-arg")
                order = [names.index(k.arg) for k in node.keywords]
                if order != sorted(order):
                    found.add("keyword-reordered")
            if len(node.args) + len(node.keywords) < len(names):
                found.add("default-omitted")
    return found
