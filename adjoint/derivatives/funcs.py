"""Derivatives of funcs called from plain Python, and higher derivatives.

``ad.grad(f)``, ``ad.value_and_grad(f)`` and ``ad.jvp(f)`` call a func's
generated adjoint or JVP (compiled by numba, or plain Python under
``ADJOINT_JIT=0``) on Python numbers -- what ``tangent.grad`` gave its users; a func
of arrays or vectors runs in a kernel printed for it (adjoint/derivatives/func_calls.py).

Higher derivatives come from transforming generated code again. The JVP of a
func or kernel is printed as user-level Python (``adjoint/emit/user.py``) and
becomes a func or kernel of its own (``jvp_func``, ``jvp_kernel``: printed.py); its reverse
mode is then a Hessian-vector product: for ``y = F(x)`` the JVP computes
``dot_y = J(x) dot_x``, and the gradient of ``w . dot_y`` with respect to ``x`` is
``H_w dot_x``, where ``H_w`` is the Hessian of ``w . F`` (reverse over forward).
So ``ad.grad(ad.grad(f))`` (f of one argument: the derivative along ``e_k`` is the
JVP's tangent), and ``mode="rev-fwd"`` of ``ad.hessian(f)`` and ``ad.autograd.hvp``.

The backward is printed the same way (``vjp_func``, ``vjp_kernel``, printed.py: its ``adj_``
names and loop stacks as user code reads them, see emit/user.py) and its forward
mode is forward over reverse: the tangent of the backward's ``adj_x`` along
``dot_x`` is ``H_w dot_x``. That is the default of ``ad.hessian`` and
``ad.autograd.hvp`` (``mode="fwd-rev"``): one JVP of the backward per column, no
reverse of a JVP. A printed backward is transformed forward-only (no reverse of
it is built: ``__adjoint_forward_only__``).
"""
import inspect
import weakref

from . import func_calls
from ..api import Func
from ..errors import AdjointError, user_frames
from ..build.modules import load_func
from .printed import compile_printed, jvp_func, vjp_func
from ..runtime.jit import cpu_backend_name


def _directional(f, k):
    """A func of ``f``'s parameters returning the derivative of ``f`` along parameter ``k``
    (the tangent of ``f``'s JVP with ``dot = e_k``)."""
    cache = f.built.setdefault("directional", {})
    if k in cache:
        return cache[k]
    tr = f.transformed
    floats = [p.name for p in tr.pf.params if p.kind == "float"]
    seeds = ", ".join("1.0" if p == tr.pf.params[k].name else "0.0" for p in floats)
    from ..emit.user import annotation
    args = ", ".join(p.name for p in tr.pf.params)
    name = f"{f.name}_d{k}"
    defaults = {p.name: p.default for p in inspect.signature(f.pyfunc).parameters.values()
                if p.default is not inspect.Parameter.empty}     # (numbers: pass fence)
    params = ", ".join(f"{p.name}: {annotation(p)}" +
                       (f" = {defaults[p.name]!r}" if p.name in defaults else "")
                       for p in tr.pf.params)
    text = (f"def {name}({params}):\n"
            f"    value, dot_value = {f.name}_jvp({args}, {seeds})\n"
            f"    return dot_value\n")
    cache[k] = Func(compile_printed(text, name, {f"{f.name}_jvp": jvp_func(f)}))
    return cache[k]


def _spec(f):
    """The compiled ``FuncSpec`` of ``f`` on the active CPU backend."""
    specs = f.built.setdefault("specs", {})
    key = (cpu_backend_name(), f.custom_grad, f.custom_jvp)   # rules given after a first use count
    if key not in specs:
        specs[key] = getattr(load_func(f, key[0]), f.name)
    return specs[key]


def _arguments(f, args, what):
    params = f.transformed.pf.params
    if len(args) < len(params):         # the defaults of the parameters left out, if any
        left = list(inspect.signature(f.pyfunc).parameters.values())[len(args):]
        if len(left) == len(params) - len(args) and \
                all(p.default is not inspect.Parameter.empty for p in left):
            args = (*args, *(p.default for p in left))
    if len(args) != len(params):
        raise TypeError(f"{what} of func '{f.name}' takes {len(params)} arguments "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    out = []
    for p, a in zip(params, args):
        try:
            if p.kind != "float" and isinstance(a, float) and not a.is_integer():
                raise TypeError
            out.append(float(a) if p.kind == "float" else int(a))
        except (TypeError, ValueError):
            raise TypeError(f"{what} of func '{f.name}' ({_where(f)}): parameter '{p.name}' "
                            f"takes a number ({p.kind}), got {type(a).__name__} {a!r}; an array "
                            "is passed to a parameter annotated ad.array(...)") from None
    return out


def _where(f):
    code = f.pyfunc.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def _positions(f, argnums, what):
    params = f.transformed.pf.params
    return func_calls.argnum_positions(f, argnums, what, [p.name for p in params],
                                       [p.kind == "float" for p in params],
                                       "is not a float; only floats have derivatives")


_PLAIN = weakref.WeakKeyDictionary()     # plain function -> its Func (ad.grad(plain))


def as_func(f, what):
    """``f`` as an ``@ad.func``: a plain function defined with ``def`` (its unannotated
    parameters are floats) is made one, once, as Tangent's ``grad`` took one."""
    if isinstance(f, Func):
        return f
    if inspect.isfunction(f) and f.__name__ != "<lambda>":
        made = _PLAIN.get(f)
        if made is None:
            made = _PLAIN[f] = Func(f)
        return made
    if inspect.isfunction(f):
        raise TypeError(f"{what} expects an @ad.func or a function defined with def: a "
                        "lambda's source is not a function adjoint can read")
    raise TypeError(f"{what} expects an @ad.func (or a function defined with def), got "
                    f"{type(f).__name__}")


class Grad:
    """``ad.grad(f, argnums)``: calling it returns the derivative of ``f`` with respect to
    the parameter(s) ``argnums`` (a number, or a tuple for a tuple of them)."""

    def __init__(self, f, argnums=0, with_value=False, of=None):
        f = as_func(f, "ad.grad")
        self.f, self.argnums, self.with_value = f, argnums, with_value
        self.of = of            # ad.grad(ad.grad(g)): the inner Grad, f printed from it
        self._place(f)
        self.__name__ = f"grad_{f.name}"

    def _place(self, f):
        where = func_calls.positions if func_calls.via_kernel(f) else _positions
        self.positions, self.many = where(f, self.argnums, "ad.grad")

    def func(self):
        """The func differentiated, as its names give it now (``Func.refresh``): ``f``, or
        for ``ad.grad(ad.grad(g))`` the derivative of ``g`` printed from ``g`` as it is
        now (a new one once ``g`` or a func it calls was redefined)."""
        f = self.f if self.of is None else \
            _directional(self.of.func(), self.of.positions[0])
        f.refresh()
        if f is not self.f:
            self.f = f
            self._place(f)
        return f

    def __repr__(self):
        return f"<ad.grad of {self.f.name}, argnums={self.argnums!r}>"

    @user_frames
    def __call__(self, *args):
        f = self.func()
        if func_calls.via_kernel(f):
            return func_calls.grad(self, args)
        values = _arguments(f, args, "ad.grad")
        kinds = f.return_kinds
        if len(kinds) != 1 or kinds[0] != "float":
            raise AdjointError(f"ad.grad needs a func returning one float; '{f.name}' returns "
                               f"{len(kinds)} value(s) ({', '.join(map(str, kinds))})")
        spec = _spec(f)
        adj = spec.adjoint(*values, 1.0)
        adj = tuple(adj) if isinstance(adj, tuple) else (adj,)
        picked = [float(adj[k]) for k in self.positions]
        g = tuple(picked) if self.many else picked[0]
        return (float(spec.forward(*values)), g) if self.with_value else g

    def source(self, stage="backward", target="cpu"):
        """The generated code this gradient runs (``ad.source(ad.grad(f))``)."""
        from ..api import source
        return source(self.func(), stage, target)


def grad(f, argnums=0):
    """The gradient of a func returning one float: ``ad.grad(f)(x, y)`` is df/dx;
    ``argnums=(0, 1)`` gives ``(df/dx, df/dy)``. ``ad.grad(ad.grad(f))`` differentiates
    again (the inner one must have a single ``argnums``)."""
    if isinstance(f, Grad):
        if func_calls.via_kernel(f.f):
            raise AdjointError(f"ad.grad of ad.grad of func '{f.f.name}', which takes arrays "
                               "or vectors: "
                               "higher derivatives of such a func are not supported (write a "
                               "kernel and use ad.autograd.hvp)")
        if f.many or f.with_value:
            raise AdjointError("ad.grad of an ad.grad needs the inner one to return one float: "
                               "give it a single argnums (and not value_and_grad)")
        return Grad(_directional(f.func(), f.positions[0]), argnums, of=f)
    return Grad(f, argnums)


def value_and_grad(f, argnums=0):
    """Like ``ad.grad``, but calling it returns ``(f(args), gradient)``."""
    return Grad(f, argnums, with_value=True)


@user_frames
def jvp(f, primals=None, tangents=None):
    """Forward mode of a func: ``ad.jvp(f, (x, y), (dx, dy))`` returns ``(value, tangent)``
    -- tuples when ``f`` returns several values. ``ad.jvp(f)`` is that function of
    ``(primals, tangents)``."""
    f = as_func(f, "ad.jvp")
    f.refresh()             # (what f's names give now: adjoint/build/bindings.py)
    if primals is None:
        def jvp_of(*args):
            if len(args) != 2:
                raise TypeError(f"ad.jvp(f) of func '{f.name}' takes two tuples, the primals "
                                "and the tangents (ad.jvp(f)((x, y), (dx, dy))), got "
                                f"{len(args)} arguments")
            return jvp(f, *args)
        return jvp_of
    if tangents is None:
        raise TypeError(f"ad.jvp of func '{f.name}': give the tangents too, one per "
                        "parameter (ad.jvp(f, (x, y), (dx, dy)))")
    primals, tangents = tuple(primals), tuple(tangents)
    if len(tangents) != len(primals):
        raise TypeError(f"ad.jvp of func '{f.name}': {len(primals)} primals but "
                        f"{len(tangents)} tangents (give one per parameter; 0.0 for an int)")
    if func_calls.via_kernel(f):
        return func_calls.jvp(f, primals, tangents)
    values = _arguments(f, primals, "ad.jvp")
    tangents += (0.0,) * (len(values) - len(tangents))      # (a defaulted parameter's)
    dots = [float(t) for p, t in zip(f.transformed.pf.params, tangents) if p.kind == "float"]
    spec = _spec(f)
    if spec.jvp is None:
        raise AdjointError(f"func '{f.name}' has no JVP: it has a custom gradient "
                           "(@ad.func_grad), or calls a func that has one")
    out = spec.jvp(*values, *dots)
    n = len(out) // 2
    vals, tans = tuple(float(v) for v in out[:n]), tuple(float(t) for t in out[n:])
    return (vals[0], tans[0]) if n == 1 else (vals, tans)


@user_frames
def hessian(f, argnums=0, mode="fwd-rev"):
    """The Hessian of a func returning one float, as a function of its arguments: a float
    for a single ``argnums``, else a tuple of rows (``H[i][j] = d2f/dx_i dx_j``).

    ``mode="fwd-rev"`` (forward over reverse, the default): column ``j`` is the JVP of
    ``f``'s backward printed as a func (``vjp_func``) along ``e_j``, seeded with
    ``adj_ret = 1``. ``mode="rev-fwd"`` (reverse over forward): column ``j`` is the
    gradient of ``f``'s JVP along ``e_j``."""
    if mode not in ("fwd-rev", "rev-fwd"):
        raise ValueError(f"ad.hessian: mode must be 'fwd-rev' or 'rev-fwd', got {mode!r}")
    f = as_func(f, "ad.hessian")
    if func_calls.via_kernel(f):
        at, many = func_calls.positions(f, argnums, "ad.hessian")

        def hess_through_kernel(*args):
            f.refresh()
            return func_calls.hessian(f, at, many, args, mode)
        hess_through_kernel.__name__ = f"hessian_{f.name}"
        return hess_through_kernel
    positions, many = _positions(f, argnums, "ad.hessian")
    if mode == "fwd-rev" and len(f.return_kinds) != 1:
        raise AdjointError(f"ad.hessian needs a func returning one float; '{f.name}' returns "
                           f"{len(f.return_kinds)} value(s)")

    def column(args, j):
        if mode == "rev-fwd":
            return [grad(Grad(f, j), i)(*args) for i in positions]
        n = len(args)
        _, tangents = jvp(vjp_func(f), (*args, 1.0), tuple(
            1.0 if k == j else 0.0 for k in range(n)) + (0.0,))
        tangents = tangents if isinstance(tangents, tuple) else (tangents,)
        return [tangents[i] for i in positions]

    def hess(*args):
        f.refresh()         # (what f's names give now: adjoint/build/bindings.py)
        args = _arguments(f, args, "ad.hessian")       # (the defaults filled in)
        cols = [column(args, j) for j in positions]
        rows = [[cols[c][r] for c in range(len(positions))] for r in range(len(positions))]
        return tuple(tuple(r) for r in rows) if many else rows[0][0]
    hess.__name__ = f"hessian_{f.name}"
    return hess
