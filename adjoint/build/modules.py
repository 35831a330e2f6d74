"""Which kernels and funcs one generated module holds, and loading a kernel's
module from the cache.

Expects: kernels and funcs (``adjoint.api.Kernel``, ``adjoint.api.Func``);
only their ``name``, ``pyfunc``, ``transformed``, ``custom_grad``,
``enable_backward`` and ``loop_capacity`` are read.
Guarantees: ``module_items`` lists every func a module needs, callees first,
and refuses two different objects of one name; ``load_generated`` returns the
imported module for a kernel and backend, written to or repaired in the cache
folder first (see ``adjoint.build.cache``). A module an earlier process generated from
the same inputs (the key of adjoint/build/inputs.py) is imported without transforming
anything.

The parser and the emitter are imported when a module is first made, so that
``import adjoint`` keeps working where gast and astor are absent (generated
modules import adjoint).
"""
from dataclasses import replace

from . import passes
from .cache import LOCK, cache_dir, load, load_indexed, module_stem, remember
from ..errors import AdjointError
from .inputs import module_key
from ..runtime.targets import target as backend_target


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
                from ..frontend.parse import parse
                parse(f.custom_grad, "grad")  # resolve names early, for the error message
    for r in roots:
        visit(r, [r])
    return order


def module_optimizations(kernels):
    """The optimization passes (adjoint/build/passes.py) the funcs of a module holding
    ``kernels`` run with: those every kernel of it runs with (all of them: ``passes``'
    setting now, where there is no kernel)."""
    out = passes.current()
    for k in kernels:
        out &= k.optimizations()
    return out


def module_items(kernels, funcs=()):
    """[(role, Transformed, custom grad, custom JVP)] for the module holding ``kernels`` and
    ``funcs`` (the custom ones parsed, or None): each kernel's tree made with the
    optimization passes it runs with, the funcs' with ``module_optimizations``."""
    from ..frontend.parse import parse
    from ..frontend.scalarize import scalarize
    shared = module_optimizations(kernels)
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
        # (a rule of a func of vectors takes and returns them: scalarized as the func is)
        grad = scalarize(parse(f.custom_grad, "grad")) if f.custom_grad is not None else None
        jvp = parse(f.custom_jvp, "grad") if getattr(f, "custom_jvp", None) is not None else None
        items.append(("func", f.transformed_at(shared), grad, jvp))
    for k in kernels:
        tr = k.transformed_at(k.optimizations())
        rev = tr.rev if k.enable_backward else replace(tr.rev, backward=None, refused=None)
        items.append(("kernel", replace(tr, rev=rev, loop_capacity=k.loop_capacity), None, None))
    return items


def _where(obj):
    code = obj.pyfunc.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def load_generated(kernel, backend_name, optimizations=None):
    """The generated module of ``kernel`` for ``backend_name``, from the cache folder
    (written or repaired there first; see ``adjoint.build.cache``), made with the optimization
    passes ``optimizations`` (default: those the kernel runs with now)."""
    if optimizations is not None and optimizations != kernel.optimizations():
        with passes.optimizing(optimizations):     # (the kernel's option applies too)
            return _load(kernel, [kernel], [], backend_name)
    return _load(kernel, [kernel], [], backend_name)


def load_func(func, backend_name):
    """The generated module of ``func`` (and the funcs it calls) for a CPU backend, as
    ``load_generated`` does for a kernel: how plain Python calls its derivatives."""
    return _load(func, [], [func], backend_name)


def _load(obj, kernels, funcs, backend_name):
    """Found by the key of its inputs when an earlier process made it; else generated,
    stored, and recorded under that key (unless the key changed meanwhile: a global the
    transformer read was rebound while it ran)."""
    target = backend_target(backend_name).code.name     # the printed code it runs
    folder = cache_dir()
    with LOCK:
        optimizations = module_optimizations(kernels) if funcs else kernels[0].optimizations()
        key = module_key(kernels, funcs, obj, target, optimizations)
        module = load_indexed(folder, key, obj.name, backend_name) if key else None
        if module is not None:
            return module
        from ..emit.module import module_source
        items = module_items(kernels, funcs)
        source = obj.transformed.pf.source
        text = module_source(items, source.display_name(), source.text(), target)
        stem = module_stem(obj.name, text)
        module = load(folder, stem, text, f"{stem}_{backend_name}")
        after = module_key(kernels, funcs, obj, target, optimizations)
        if after is not None and after == key:
            remember(folder, after, stem)
        return module
