"""The decorators ``@ad.kernel``, ``@ad.func``, ``@ad.func_grad`` and ``ad.source``."""
import hashlib
import importlib.util
import os
import sys

from .errors import AdjointError


def cache_dir():
    """Where generated modules live: ``$ADJOINT_CACHE_DIR`` or ``~/.cache/adjoint``."""
    root = os.environ.get("ADJOINT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "adjoint")
    return root


class Func:
    """A device function: callable from kernels, other funcs and plain Python."""

    def __init__(self, pyfunc):
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.custom_grad = None
        self._tr = None
        self.__doc__ = pyfunc.__doc__
        self.__wrapped__ = pyfunc

    def __call__(self, *args):
        return self.pyfunc(*args)

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"<ad.func {self.name}>"

    @property
    def transformed(self):
        if self._tr is None:
            from .pipeline import transform
            self._tr = transform(self.pyfunc, "func")
        return self._tr

    @property
    def n_returns(self):
        return len(self.transformed.return_kinds)

    @property
    def return_kinds(self):
        return self.transformed.return_kinds


class Kernel:
    """A kernel: launched over a 1-, 2- or 3-D grid with ``ad.launch``."""

    def __init__(self, pyfunc, enable_backward=True, loop_capacity=256, bounds_check=True):
        self.pyfunc = pyfunc
        self.name = pyfunc.__name__
        self.enable_backward = enable_backward
        self.loop_capacity = loop_capacity
        self.bounds_check = bounds_check
        self._tr = None
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

    @property
    def transformed(self):
        if self._tr is None:
            from .pipeline import transform
            self._tr = transform(self.pyfunc, "kernel", self.bounds_check)
        return self._tr

    @property
    def spec(self):
        """The compiled CPU ``KernelSpec`` for the active backend."""
        return self.spec_for("cpu")

    def spec_for(self, device):
        """The compiled ``KernelSpec`` for ``device`` (generated, cached on disk, imported once)."""
        from .runtime.jit import cpu_backend_name
        name = "cuda" if device == "cuda" else cpu_backend_name()
        if name not in self._specs:
            self.modules[name] = load_generated(self, name)
            self._specs[name] = getattr(self.modules[name], self.name)
        return self._specs[name]


def func_closure(roots):
    """Funcs called (transitively) by ``roots``, callees first."""
    order, seen = [], set()

    def visit(obj, stack):
        for f in obj.transformed.pf.funcs:
            if f in stack:
                raise AdjointError(f"recursion between funcs is not supported ({f.name})")
            if id(f) not in seen:
                visit(f, stack + [f])
                seen.add(id(f))
                order.append(f)
            if f.custom_grad is not None:
                from .frontend.parse import parse
                parse(f.custom_grad, "grad")  # resolve names early, for the error message
    for r in roots:
        visit(r, [r])
    return order


def module_items(kernels, funcs=()):
    """[(role, Transformed, custom grad)] for the module holding ``kernels`` and ``funcs``."""
    from .frontend.parse import parse
    items = []
    all_funcs = func_closure(list(kernels) + list(funcs))
    for f in funcs:
        if f not in all_funcs:
            all_funcs.append(f)
    names = {}
    for obj in list(all_funcs) + list(kernels):
        other = names.setdefault(obj.name, obj)
        if other is not obj:
            raise AdjointError(f"two different kernels/funcs are named '{obj.name}' "
                               f"({_where(other)} and {_where(obj)}); one generated module "
                               "holds both, so rename one")
    for f in all_funcs:
        grad = parse(f.custom_grad, "grad") if f.custom_grad is not None else None
        items.append(("func", f.transformed, grad))
    for k in kernels:
        tr = k.transformed
        if not k.enable_backward:
            tr.rev.backward = None
        tr.loop_capacity = k.loop_capacity
        items.append(("kernel", tr, None))
    return items


def _where(obj):
    code = obj.pyfunc.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def load_generated(kernel, backend_name):
    from .emit.module import module_source
    items = module_items([kernel])
    src_path = kernel.transformed.pf.source.filename
    with open(src_path) as fh:
        source_text = fh.read()
    target = "cuda" if backend_name == "cuda" else "cpu"
    text = module_source(items, os.path.basename(src_path), source_text, target)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    modname = f"adjoint_gen_{kernel.name}_{digest}"
    path = os.path.join(cache_dir(), f"{modname}.py")
    if not os.path.exists(path):
        os.makedirs(cache_dir(), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return import_path(path, f"{modname}_{backend_name}")


def import_path(path, modname):
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    spec.loader.exec_module(module)
    return module


def kernel(fn=None, *, enable_backward=True, loop_capacity=256, bounds_check=True):
    """Decorator: ``@ad.kernel`` or ``@ad.kernel(enable_backward=False, loop_capacity=N,
    bounds_check=False)``.

    ``loop_capacity`` bounds the iterations one GPU thread may record per loop
    (CUDA only: CPU stacks grow as needed). ``bounds_check`` (default on): every
    array index is checked -- once per launch where it is the thread index, once
    before a loop where it is the loop variable, else where it is used -- and an
    index out of bounds (negative ones included: nothing wraps around) raises
    ``ad.BoundsError``. ``bounds_check=False`` emits no checks: an index out of
    bounds then reads or writes outside the array."""
    options = dict(enable_backward=enable_backward, loop_capacity=loop_capacity,
                   bounds_check=bounds_check)
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


def source(obj, stage="backward", target="cpu"):
    """Python source of one kernel or func after ``stage``
    (parse, normalize, ssa, forward, backward). ``target="cuda"`` shows the
    forward and backward as the CUDA module spells them."""
    from .pipeline import stage_source
    role = "kernel" if isinstance(obj, Kernel) else "func"
    if not isinstance(obj, (Kernel, Func)):
        raise TypeError("ad.source expects an @ad.kernel or an @ad.func")
    return stage_source(obj.pyfunc, role, stage, target,
                        getattr(obj, "loop_capacity", 256), getattr(obj, "bounds_check", True))
