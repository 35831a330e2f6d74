"""The reference: a program run as plain Python, one thread after another, in float64.

The program's source is executed without adjoint: ``ad`` is a stand-in whose
decorators return the plain functions, whose ``tid()`` returns the index of the
thread being run, and whose atomics are ``arr[i] += v``. Threads run in row-major
order, which is also the order the serial plan guarantees, so a launch means the
same here as in adjoint.

Every comparison the program makes, and every choice of ``min``/``max``/``abs``/
``clamp``, is appended to a trace. Two runs with equal traces took the same
branches everywhere, so the program is smooth between their inputs and a central
difference across them is meaningful; when the traces differ, a branch switched
and the finite difference is skipped.
"""
import ast
import builtins
import math
import types

import numpy as np


class _Instrument(ast.NodeTransformer):
    """Wrap every comparison ``a < b`` as ``__cmp(a < b)``."""

    def visit_Compare(self, node):
        self.generic_visit(node)
        return ast.Call(func=ast.Name("__cmp", ast.Load()), args=[node], keywords=[])


class Reference:
    """The functions of one program, runnable as plain Python with a branch trace.

    ``float32``: run on float32 arrays, the program rounds as a float32 kernel does
    (``_rounded``): each math function's and ``float()``'s result is a float32, and numpy
    keeps float32 arithmetic float32. Used to tell a float32 run whose rounding took
    another branch from a wrong one (check.py)."""

    def __init__(self, prog, float32=False):
        self.prog = prog
        self.trace = []
        self.thread = 0
        body = "\n\n".join(prog.funcs + [k.source for k in prog.kernels])
        tree = ast.fix_missing_locations(_Instrument().visit(ast.parse(body)))
        self.ns = self._namespace()
        if float32:
            self._rounded()
        exec(compile(tree, f"<fuzz reference {prog.seed}>", "exec"), self.ns)

    # -- the stand-in for `adjoint` ------------------------------------------------------
    def _namespace(self):
        trace = self.trace

        def cmp(v):
            trace.append(bool(v))
            return v

        def tmin(a, b):
            trace.append(b < a)
            return b if b < a else a

        def tmax(a, b):
            trace.append(b > a)
            return b if b > a else a

        def tabs(x):
            trace.append(x < 0)
            return -x if x < 0 else x

        def clamp(x, lo, hi):
            trace.append((x < lo, x > hi))
            return lo if x < lo else hi if x > hi else x

        def atomic(sign):
            def add(arr, *args):
                *idx, value = args
                arr[tuple(idx)] += sign * value
            return add

        ad = types.SimpleNamespace(
            kernel=lambda f: f, func=lambda f: f, func_grad=lambda f: (lambda g: None),
            func_jvp=lambda f: (lambda g: None),
            array=lambda *a, **k: None, int32="int32", int64="int64", float32="float32",
            float64="float64", tid=lambda: self.thread,
            atomic_add=atomic(1.0), atomic_sub=atomic(-1.0), clamp=clamp,
            min=tmin, max=tmax, abs=tabs, sin=math.sin, cos=math.cos, tan=math.tan,
            atan=math.atan, atan2=math.atan2, tanh=math.tanh, sinh=math.sinh, cosh=math.cosh,
            exp=math.exp, log=math.log, sqrt=math.sqrt, pow=math.pow)
        return {"__builtins__": builtins, "math": math, "np": np, "ad": ad,
                "min": tmin, "max": tmax, "abs": tabs, "__cmp": cmp}

    def _rounded(self):
        """Make ``math.*``, ``ad.<math function>`` and ``float`` return float32."""
        def f32(fn):
            return lambda *args: np.float32(fn(*(float(a) for a in args)))
        names = [n for n in dir(math) if not n.startswith("_")]
        self.ns["math"] = types.SimpleNamespace(**{
            n: f32(getattr(math, n)) if callable(getattr(math, n)) else getattr(math, n)
            for n in names})
        ad = self.ns["ad"]
        for n in ("sin", "cos", "tan", "atan", "atan2", "tanh", "sinh", "cosh", "exp", "log",
                  "sqrt", "pow"):
            setattr(ad, n, f32(getattr(math, n)))
        self.ns["float"] = np.float32

    # -- running -------------------------------------------------------------------------
    def launch(self, name, args):
        fn = self.ns[name]
        grid = self.prog.grid
        if len(grid) == 1:
            for t in range(grid[0]):
                self.thread = t
                fn(*args)
        else:
            for t0 in range(grid[0]):
                for t1 in range(grid[1]):
                    self.thread = (t0, t1)
                    fn(*args)

    def run(self, data):
        """Run the schedule on copies of ``data``; returns (final arrays, trace)."""
        self.trace.clear()
        arrays = {n: v.copy() for n, v in data.items()}
        for s in self.prog.steps:
            if s.op == "launch":
                self.launch(s.kernel, [arrays[a] if isinstance(a, str) else a for a in s.args])
            elif s.op == "clone":
                arrays[s.dest] = arrays[s.src].copy()
            else:
                np.copyto(arrays[s.dest], arrays[s.src])
        return arrays, list(self.trace)

    def loss(self, data, weights):
        arrays, trace = self.run(data)
        return sum(float(np.sum(w * arrays[n])) for n, w in weights.items()), trace
