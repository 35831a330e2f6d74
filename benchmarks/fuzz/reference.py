"""The reference: a program run as plain Python, one thread after another, in float64.

The program's source is executed without adjoint: ``ad`` is a stand-in whose
decorators return the plain functions, whose ``tid()`` returns the index of the
thread being run, and whose atomics are ``arr[i] += v``. Threads run in row-major
order, which is also the order the serial plan guarantees, so a launch means the
same here as in adjoint.

Every comparison the program makes, every ``math.isnan/isinf/isfinite``, every choice
of ``min``/``max``/``abs``/``clamp``, and the integer quotient of every ``math.fmod``
(its value jumps where ``x / y`` crosses an integer) is appended to a trace. Two runs with equal traces took the same
branches everywhere, so the program is smooth between their inputs and a central
difference across them is meaningful; when the traces differ, a branch switched
and the finite difference is skipped.

Vector types are written here from their definitions, independently of adjoint
(vecref.py): a vec3, quat (x, y, z, w) or mat33 is a float64 numpy array. A vector
is a value in adjoint, so none is ever changed in place here: the program's
``u += w`` runs as ``u = u + w``, and ``u.x = s`` (``m[0, 1] = s``) as
``u = __set(u, 0, s)``, which returns a changed copy; an array of vec3 (an (n, 3)
numpy array) is seen through a ``VecArray``, whose loads are copies.
"""
import ast
import builtins
import copy
import math
import types

import numpy as np

from .vecref import VecArray, set_component, vector_namespace


PREDICATES = ("isnan", "isinf", "isfinite")


class _Instrument(ast.NodeTransformer):
    """Wrap every comparison ``a < b`` as ``__cmp(a < b)``, and every ``math.isnan(x)``
    (``isinf``, ``isfinite``, ``ad.`` too) as ``__cmp(math.isnan(x))``; call
    ``math.fmod`` (``ad.fmod``) as ``__fmod``, which records the quotient it truncated."""

    def visit_Compare(self, node):
        self.generic_visit(node)
        return ast.Call(func=ast.Name("__cmp", ast.Load()), args=[node], keywords=[])

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and
                f.value.id in ("math", "ad")):
            return node
        if f.attr == "fmod":
            node.func = ast.Name("__fmod", ast.Load())
        elif f.attr in PREDICATES:
            return ast.Call(func=ast.Name("__cmp", ast.Load()), args=[node], keywords=[])
        return node


class _ValueSemantics(ast.NodeTransformer):
    """``x += e`` as ``x = x + e``; ``u.x = e`` and ``u[k] = e`` (``u`` not an array
    parameter) as ``u = __set(u, k, e)``: no vector is changed in place."""

    def __init__(self):
        self.arrays = set()

    def visit_FunctionDef(self, node):
        saved = self.arrays
        self.arrays = {a.arg for a in node.args.args if isinstance(a.annotation, ast.Call)}
        self.generic_visit(node)
        self.arrays = saved
        return node

    def _component(self, target):
        """(name, key) when ``target`` is a component of a local, else None."""
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            return target.value.id, ast.Constant("xyzw".index(target.attr))
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
                target.value.id not in self.arrays:
            return target.value.id, target.slice
        return None

    @staticmethod
    def _set(name, key, value):
        call = ast.Call(ast.Name("__set", ast.Load()), [ast.Name(name, ast.Load()), key, value], [])
        return ast.Assign([ast.Name(name, ast.Store())], call)

    def visit_Assign(self, node):
        self.generic_visit(node)
        part = self._component(node.targets[0]) if len(node.targets) == 1 else None
        return self._set(*part, node.value) if part else node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        part = self._component(node.target)
        if not part and not isinstance(node.target, ast.Name):
            return node                     # an array element: += on numpy is what it means
        load = copy.deepcopy(node.target)
        load.ctx = ast.Load()
        value = ast.BinOp(load, node.op, node.value)
        if part:
            return self._set(*part, value)
        return ast.Assign([ast.Name(node.target.id, ast.Store())], value)


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
        tree = _ValueSemantics().visit(_Instrument().visit(ast.parse(body)))
        tree = ast.fix_missing_locations(tree)
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

        def fmod(x, y):
            r = self.ns["math"].fmod(x, y)     # (the float32 one in a float32 run)
            trace.append(("fmod", int(np.rint(float((x - r) / y)))))
            return r

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
            exp=math.exp, log=math.log, sqrt=math.sqrt, pow=math.pow, asinh=math.asinh,
            acosh=math.acosh, atanh=math.atanh, hypot=math.hypot, fmod=math.fmod,
            isnan=math.isnan, isinf=math.isinf, isfinite=math.isfinite, **vector_namespace())
        return {"__builtins__": builtins, "math": math, "np": np, "ad": ad,
                "min": tmin, "max": tmax, "abs": tabs, "__cmp": cmp, "__set": set_component,
                "__fmod": fmod}

    def _rounded(self):
        """Make ``math.*``, ``ad.<math function>`` and ``float`` return float32."""
        def f32(fn):
            return lambda *args: np.float32(fn(*(float(a) for a in args)))
        names = [n for n in dir(math) if not n.startswith("_")]
        self.ns["math"] = types.SimpleNamespace(**{
            n: f32(getattr(math, n)) if callable(getattr(math, n)) and n not in PREDICATES
            else getattr(math, n) for n in names})
        ad = self.ns["ad"]
        for n in ("sin", "cos", "tan", "atan", "atan2", "tanh", "sinh", "cosh", "exp", "log",
                  "sqrt", "pow", "asinh", "acosh", "atanh", "hypot"):
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

    def _view(self, arg, arrays):
        """A launch argument: a number, a numpy array, or a VecArray over one."""
        return self.view(arg, arrays[arg]) if isinstance(arg, str) else arg

    def view(self, name, values):
        """The program's array ``name`` holding ``values``, as its kernels see it (a
        VecArray for an array of vec3)."""
        return VecArray(values) if self.prog.arrays[name].dtype else values

    def run(self, data):
        """Run the schedule on copies of ``data``; returns (final arrays, trace)."""
        self.trace.clear()
        arrays = {n: v.copy() for n, v in data.items()}
        for s in self.prog.steps:
            if s.op == "launch":
                self.launch(s.kernel, [self._view(a, arrays) for a in s.args])
            elif s.op == "clone":
                arrays[s.dest] = arrays[s.src].copy()
            else:
                np.copyto(arrays[s.dest], arrays[s.src])
        return arrays, list(self.trace)

    def loss(self, data, weights):
        arrays, trace = self.run(data)
        return sum(float(np.sum(w * arrays[n])) for n, w in weights.items()), trace
