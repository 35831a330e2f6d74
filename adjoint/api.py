"""The decorators ``@ad.kernel``, ``@ad.func``, ``@ad.func_grad`` and ``ad.source``.

Kernels and funcs are transformed lazily, and a kernel's module is generated and
loaded at its first launch on a backend. Both happen under ``cache.LOCK``, so
any number of threads may make a kernel's first launch at once: one generates
and loads, the others wait and then share the result.

What was built is kept while the names it was built from give the same objects
(adjoint/build/bindings.py): each launch checks that (a few dict lookups), and a func
redefined, a number rebound or a gradient given since makes the kernel (or a
func's derivatives) be built again from what the names give now.
"""
from .build import bindings, passes
from .build.cache import LOCK, cache_dir, import_path, load  # noqa: F401 - re-exported
from .errors import AdjointError, user_frames
from .frontend.devicefunc import DeviceFunction
from .build.inputs import own_inputs
from .build.modules import func_closure, load_generated, module_items  # noqa: F401 - re-exported
from .runtime.jit import cpu_backend_name


def _transform_described(pyfunc, role, bounds_check, optimizations, zero_tangents=frozenset(),
                         resume=None):
    """(inputs, watch, transformed): ``pyfunc`` through every pass, with the description of
    its inputs read before and after (adjoint/build/inputs.py), kept only when the two agree: the
    frozen tree and its description belong together, so a module key never describes
    inputs other than the ones its text was made from. ``watch``: what its names gave
    before it was transformed (adjoint/build/bindings.py). ``optimizations``: the optimization
    passes that run (adjoint/build/passes.py)."""
    from .build.pipeline import transform
    watch = bindings.watch_of(pyfunc)
    before = own_inputs(pyfunc, role, bounds_check)
    tr = transform(pyfunc, role, bounds_check, optimizations, zero_tangents, resume)
    after = own_inputs(pyfunc, role, bounds_check) if before is not None else None
    return (before if before == after else None), watch, tr


class _Built:
    """What a kernel or func builds from its tree, kept while its names give what they
    gave (adjoint/build/bindings.py). ``built``: what other modules print or compile from it
    (adjoint/derivatives/: printed.py, funcs.py, func_calls.py), dropped with the tree."""

    def _init_built(self):
        self._tr = None         # the first tree made (its inputs and watch were read with it)
        self._trs = {}          # {optimizations: tree}: the trees made, _tr among them
        self._inputs = None     # inputs.Own read with _tr (None: not described)
        self._watch = None      # bindings.Bindings of its names, read with _tr
        self._bound = bindings.NEVER    # the bindings of what was built (snapshot)
        self._generation = object()     # replaced by reset(): its callers watch it
        self.built = {}

    def transformed_at(self, optimizations):
        """The tree made with the optimization passes ``optimizations`` (adjoint/build/passes.py):
        made once for each such set, the core passes' work being the same for all."""
        tr = self._trs.get(optimizations)
        if tr is not None:
            return tr
        from .build.pipeline import transform
        role, bounds_check = self._role, getattr(self, "bounds_check", True)
        zero = getattr(self, "zero_tangents", frozenset())
        base = getattr(self, "_base", None)     # (a variant: Kernel.with_zero_tangents)
        resume = base.transformed_at(optimizations).resume if base is not None else None
        with LOCK:
            tr = self._trs.get(optimizations)
            if tr is None:
                if self._tr is None:
                    self._inputs, self._watch, tr = _transform_described(
                        self.pyfunc, role, bounds_check, optimizations, zero, resume)
                    self._tr = tr
                else:
                    tr = transform(self.pyfunc, role, bounds_check, optimizations, zero,
                                   resume)
                self._trs[optimizations] = tr
        return tr

    @property
    def transformed(self):
        """The tree the optimization passes enabled now make (``optimizations()``)."""
        return self.transformed_at(self.optimizations())

    def reset(self):
        """Forget the tree and everything built from it (a name it read was rebound)."""
        with LOCK:
            self._forget()
            self._tr = self._inputs = self._watch = None
            self._trs = {}
            self._generation = object()

    def _forget(self):
        self.built = {}
        self._bound = bindings.NEVER

    def refresh(self):
        """Make what was built from this kernel or func (its modules, its derivatives)
        current: kept while its names, and those of every func it calls, give what they
        gave (cheap: the common case); else the stale trees are reset and the next use
        builds again."""
        if self._bound.current():
            return
        with LOCK:
            if not self._bound.current():
                bindings.refresh(self)
                self._forget()
                self._bound = bindings.snapshot(self)


class Func(DeviceFunction, _Built):
    """A device function: callable from kernels, other funcs and plain Python."""

    _role = "func"

    def __init__(self, pyfunc):
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self._init_built()
        self._custom_grad = None
        self._custom_jvp = None
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    def __call__(self, *args):
        return self.pyfunc(*args)

    @property
    def custom_grad(self):
        """The hand-written adjoint (``@ad.func_grad``), or None."""
        return self._custom_grad

    @custom_grad.setter
    def custom_grad(self, rule):
        self._custom_grad = rule
        self._generation = object()     # its callers' trees and modules read it

    @property
    def custom_jvp(self):
        """The hand-written JVP (``@ad.func_jvp``), or None."""
        return self._custom_jvp

    @custom_jvp.setter
    def custom_jvp(self, rule):
        self._custom_jvp = rule
        self._generation = object()

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"<ad.func {self.name}>"

    @staticmethod
    def optimizations():
        """The optimization passes a func's own derivatives run with now (``ad.grad`` of
        it; a kernel calling it uses the kernel's): ``ADJOINT_OPTIMIZE``'s."""
        return passes.current()

    @property
    def n_returns(self):
        return len(self.transformed.return_kinds)

    @property
    def return_kinds(self):
        return self.transformed.return_kinds


class Kernel(_Built):
    """A kernel: launched over a 1-, 2- or 3-D grid with ``ad.launch``."""

    _role = "kernel"

    def __init__(self, pyfunc, enable_backward=True, loop_capacity=256, bounds_check=True,
                 optimize=True, zero_tangents=frozenset()):
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.enable_backward = enable_backward
        self.loop_capacity = loop_capacity
        self.bounds_check = bounds_check
        self.optimize = optimize
        self.zero_tangents = frozenset(zero_tangents)   # (see with_zero_tangents)
        self._only = None if optimize is True or optimize is None else \
            passes.parse_setting(optimize, f"@ad.kernel(optimize=...) of {self.name}")
        self._init_built()
        self._specs = {}
        self.modules = {}
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"<ad.kernel {self.name}>"

    def __call__(self, *args, **kwargs):
        raise AdjointError(f"kernel '{self.name}' cannot be called directly; "
                           "use ad.launch(kernel, dim, inputs=..., outputs=...)")

    def with_zero_tangents(self, untangented):
        """This kernel as a JVP launch given no tangent for the float array parameters named
        in ``untangented`` runs it: those the kernel only reads are held constant (their
        tangents are zeros, so every term of them is dropped rather than computed as a zero:
        JAX's symbolic zeros), in a kernel of its own (its module holds its JVP alone,
        made without them; a tape records this kernel's launch); this kernel itself when
        there are none.
        Its tangents are the JVP's given zeros, up to rounding (a rule with an operand
        held constant takes its one-operand form), wherever the dropped partials are
        finite; where one is ``inf`` or ``nan`` the JVP given zeros has ``0 * inf = nan``
        and this one the derivative along the rest.
        It is optimization pass ``zero_tangents`` (adjoint/build/passes.py): with it off
        (``ADJOINT_OPTIMIZE=-zero_tangents``, ``optimize=False``), this kernel itself."""
        if not untangented or "zero_tangents" not in self.optimizations():
            return self
        tr = self.transformed
        zero = frozenset(p.name for p in tr.pf.differentiable()
                         if p.is_array and p.name in untangented and p.name not in tr.writes)
        if not zero:
            return self
        key = ("zero_tangents", zero)
        variant = self.built.get(key)
        if variant is None:
            variant = self.built[key] = Kernel(
                self.pyfunc, enable_backward=self.enable_backward,
                loop_capacity=self.loop_capacity, bounds_check=self.bounds_check,
                optimize=self.optimize, zero_tangents=zero)
            variant._base = self        # (its transform resumes from this kernel's)
        return variant

    def optimizations(self):
        """The optimization passes this kernel runs with now: those ``ADJOINT_OPTIMIZE`` (or
        ``passes.optimizing``) and ``@ad.kernel(optimize=...)`` both enable."""
        here = passes.current()
        return here if self._only is None else here & self._only

    def _forget(self):
        _Built._forget(self)
        self._specs = {}
        self.modules = {}

    @property
    def spec(self):
        """The compiled CPU ``KernelSpec`` for the active backend."""
        return self.spec_for("cpu")

    @user_frames
    def spec_for(self, device):
        """The compiled ``KernelSpec`` for ``device`` (generated, cached on disk, imported
        once per process, also when several threads ask at once), made from what the
        kernel's names give now (``refresh``)."""
        key = ("cuda" if device == "cuda" else cpu_backend_name(), self.optimizations())
        bound = self._bound             # (read first: a refresh replaces it last)
        spec = self._specs.get(key)
        if spec is None or not bound.current():
            with LOCK:
                self.refresh()
                spec = self._specs.get(key)
                if spec is None:
                    module = load_generated(self, key[0], key[1])
                    spec = getattr(module, self.name)
                    self.modules[key[0] if key[1] == passes.ALL else key] = module
                    self._specs[key] = spec
        return spec


def kernel(fn=None, *, enable_backward=True, loop_capacity=256, bounds_check=True,
           optimize=True):
    """Decorator: ``@ad.kernel`` or ``@ad.kernel(enable_backward=False, loop_capacity=N,
    bounds_check=False, optimize=False)``.

    ``loop_capacity`` bounds the iterations one GPU thread may record per loop
    (CUDA only: CPU stacks grow as needed). ``bounds_check`` (default on): every
    array index is checked -- once per launch where it is the thread index, once
    before a loop where it is the loop variable, else where it is used -- and an
    index out of bounds (negative ones included: nothing wraps around) raises
    ``ad.BoundsError``. ``bounds_check=False`` emits no checks: an index out of
    bounds then reads or writes outside the array. ``optimize`` (default True: as
    ``ADJOINT_OPTIMIZE`` says): ``False`` runs no optimization pass (the plain
    rule-by-rule code), ``"-scale,-jam"`` all but those (adjoint/build/passes.py); a pass runs
    only where both this and ``ADJOINT_OPTIMIZE`` allow it."""
    options = dict(enable_backward=enable_backward, loop_capacity=loop_capacity,
                   bounds_check=bounds_check, optimize=optimize)
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)


def func(fn):
    """Decorator: a device function callable from kernels, funcs and plain Python."""
    return Func(fn)


def func_grad(f):
    """Decorator: a hand-written adjoint ``g(<f's params>, adj_ret)`` for func ``f``."""
    if not isinstance(f, Func):
        raise TypeError("@ad.func_grad expects an @ad.func")

    def deco(g):
        f.custom_grad = g
        return g
    return deco


def func_jvp(f):
    """Decorator: a hand-written JVP ``h(<f's params>, <a tangent per float param>)`` for
    func ``f``, returning ``f``'s values and then one tangent per value (a pair for a
    func of one value): forward mode, as ``@ad.func_grad`` is reverse mode."""
    if not isinstance(f, Func):
        raise TypeError("@ad.func_jvp expects an @ad.func")

    def deco(h):
        f.custom_jvp = h
        h.__adjoint_rule__ = True       # its dot_ parameters are not the user's locals
        return h
    return deco


@user_frames
def source(obj, stage="backward", target="cpu", optimize=True):
    """Python source of one kernel or func after ``stage``
    (parse, normalize, ssa, forward, backward, jvp). ``target="cuda"`` shows the
    forward, backward and JVP as the CUDA module spells them. ``optimize``: True, the
    code that runs (the optimization passes the kernel runs with now); False, the plain
    rule-by-rule code of one thread (no optimization pass; what a learner reads); or a
    setting as ``ADJOINT_OPTIMIZE`` takes (``"-scale"``)."""
    from .build.pipeline import stage_source
    if not isinstance(obj, (Kernel, Func)) and callable(getattr(obj, "source", None)):
        return obj.source(stage, target)        # ad.grad(f): the code it runs
    role = "kernel" if isinstance(obj, Kernel) else "func"
    if not isinstance(obj, (Kernel, Func)):
        raise TypeError("ad.source expects an @ad.kernel or an @ad.func")
    enabled = obj.optimizations() if optimize is True else \
        obj.optimizations() & passes.parse_setting(optimize, "ad.source(optimize=...)")
    return stage_source(obj.pyfunc, role, stage, target,
                        getattr(obj, "loop_capacity", 256), getattr(obj, "bounds_check", True),
                        enabled, threads_only=optimize is False)


@user_frames
def after_source(obj, name, target="cpu"):
    """What pass ``name`` (adjoint/build/passes.py) made of a kernel or func, as Python source:
    the passes before it run as they run for ``obj`` now (``adjoint show --after``)."""
    from .build.pipeline import after_source as after
    if not isinstance(obj, (Kernel, Func)):
        raise TypeError("ad.after_source expects an @ad.kernel or an @ad.func")
    return after(obj.pyfunc, obj._role, name, target, getattr(obj, "loop_capacity", 256),
                 getattr(obj, "bounds_check", True), obj.optimizations())


def optimization_summary(obj):
    """Which optimization passes ``obj`` runs with now, and which of them changed it."""
    enabled = obj.optimizations()
    applied = [n for n in obj.transformed_at(enabled).applied]
    return f"{passes.describe(enabled)}; applied here: {', '.join(applied) or 'none'}"
