"""The ``KernelSpec``/``FuncSpec`` of a generated module: which function runs each part of
a kernel (forward, backward, JVP and the variants of the store policy, pass once and pass
gather), behind which checks, and the refusals spelled for the parts a kernel has not."""
import gast

from ..derive.ir import Print, walk_stmts
from . import bounds
from .precision import float32_kernel
from .targets import code


def refusal(tr, refused):
    """A refusal pass reverse or jvp recorded, ``(line, why)``, as its launch says it: the
    user's file (by name: the generated module is the same on every machine) and line."""
    line, why = refused
    return f"{tr.pf.source.display_name()}:{line}: {why}"


def jvp_refusal(tr):
    """Why ``tr`` has no JVP, or None: pass jvp refused it (``Tangent.refused``), or it
    calls (directly or through other funcs) a func with a custom gradient, whose
    derivative the transformer must not guess."""
    if tr.tangent is not None and tr.tangent.refused is not None:
        return refusal(tr, tr.tangent.refused)
    for f in tr.pf.funcs:
        if getattr(f, "custom_jvp", None) is not None:
            continue                    # the user's JVP (@ad.func_jvp)
        if f.custom_grad is not None:
            return (f"it calls func '{f.name}', which has a custom gradient (@ad.func_grad) "
                    "and no @ad.func_jvp: forward mode would not use the gradient, and could "
                    "disagree with it")
        why = jvp_refusal(f.transformed)
        if why is not None:
            return why
    return None


def trips(tr):
    """The trip counts that multiply a thread's work, as ``rt.by_size`` reads them from a
    launch's arguments to choose the serial loop or the parallel plan: for the deepest
    nest of loops whose bounds a launch gives, ``k`` where a loop runs to the ``k``-th
    parameter's value (``range(n)``, ``range(n - 1)``), ``(k, d)`` where it runs to its
    ``shape[d]``. Other loops (a ``while``, a bound read from an array) count once: this
    only chooses between two plans that compute the same values."""
    index = {p.name: k for k, p in enumerate(tr.pf.params)}
    arrays = {p.name for p in tr.pf.params if p.is_array}
    made = {s.targets[0].id: s.value for s in walk_stmts(tr.ssa.body)
            if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name)}

    def bound(e, depth=0):
        if isinstance(e, gast.Name):
            if e.id in index:
                return None if e.id in arrays else index[e.id]
            return bound(made[e.id], depth + 1) if e.id in made and depth < 4 else None
        if isinstance(e, gast.BinOp):
            return bound(e.left, depth) if bound(e.left, depth) is not None else \
                bound(e.right, depth)
        if isinstance(e, gast.Subscript) and isinstance(e.value, gast.Attribute) and \
                e.value.attr == "shape" and isinstance(e.value.value, gast.Name) and \
                e.value.value.id in arrays and isinstance(e.slice, gast.Constant):
            return (index[e.value.value.id], e.slice.value)
        return None

    def nest(stmts):
        best = ()
        for s in stmts:
            chain = ()
            if isinstance(s, gast.For):
                args = s.iter.args if isinstance(s.iter, gast.Call) else []
                stop = bound(args[1] if len(args) > 1 else args[0]) if args else None
                chain = ((stop,) if stop is not None else ()) + nest(s.body)
            elif isinstance(s, gast.While):
                chain = nest(s.body)
            elif isinstance(s, gast.If):
                chain = max(nest(s.body), nest(s.orelse), key=len)
            if len(chain) > len(best):
                best = chain
        return best
    return nest(tr.ssa.body)


def prints(tr, seen=None):
    """Whether ``tr``'s forward may print: a ``print`` in its body or in a func it calls
    (directly or through other funcs). Its CUDA launcher then waits for the GPU, which
    writes device prints out only when the host synchronizes."""
    seen = set() if seen is None else seen
    if id(tr) in seen:
        return False
    seen.add(id(tr))
    if any(isinstance(n, Print) for s in tr.norm.body for n in gast.walk(s)):
        return True
    return any(prints(f.transformed, seen) for f in tr.pf.funcs)


def gather_clean(tr):
    """Whether a kernel's gathered backward has a clean variant, its receivers storing
    their sums (``adj_u[e0, e1] = 0.0 + adj_u_sum``) into clean gradients: each receiver
    adds into its element once, and nothing else of the launch writes those arrays
    (optimize/gather.py). Not beside pass once's own clean arrays (one set per kernel)."""
    return tr.gather is not None and tr.once is None and tr.rev.backward is not None


def _writes_status(fns, kernel, part="backward"):
    """Whether a kernel's forward or backward can report a failed bounds check or (CUDA
    backward) a loop overflow (it has loop stacks, or calls a func adjoint that may):
    only then does its launcher read the status back."""
    for fname, _params, body, *_ in fns:
        if fname == f"{kernel}_{part}_thread":
            return bounds.reports(body)
    return False


def _launcher(tr, target, fns, part):
    """How the ``KernelSpec`` names a kernel's ``part`` (forward, backward, jvp,
    forward_save or backward_saved): its grid
    function, behind the bounds checks (``rt.checked``) or the CUDA launcher; or
    ``(what, why)`` when it has none (spelled ``rt.unavailable(what, why)``)."""
    n = tr.pf.name
    # a gathered backward's variants (gather_clean) differ from it only in their gathered
    # grid: they have its thread function (and run its serial loop: emit/module.py
    # _gathered)
    own = "backward" if has(fns, f"{n}_backward_planned") and \
        part.startswith("backward") else part
    fn, status = f"{n}_{part}", _writes_status(fns, n, own)
    if has(fns, f"{fn}_small"):
        loops = trips(tr)
        fn = f"rt.by_size({fn}_small, {fn}, {tr.dims}" + \
            (f", trips={loops!r})" if loops else ")")
    part = part.split("_")[0]           # forward_save runs as a forward, backward_saved too
    if part == "backward" and tr.rev.backward is None:
        return None if tr.rev.refused is None else \
            (f"kernel {n!r} has no backward", refusal(tr, tr.rev.refused))
    if part == "jvp" and jvp_refusal(tr) is not None:
        return (f"kernel {n!r} has no JVP", jvp_refusal(tr))
    if not code(target).host:       # a device code: one thread per grid point
        serial = tr.plans[1 if part == "backward" else 0].mode == "serial"
        if part == "backward" and serial:
            return f"rt.refused({tr.plans[1].reason!r})"
        if part == "jvp" and serial:
            return (f"kernel {n!r} has no CUDA JVP", tr.plans[0].reason +
                    ": which thread's value, and so which tangent, survived is unknown")
        with_bounds = f", bounds={bounds.bounds_name(n)}" if tr.sites else ""
        if part == "backward":
            return f"rt.launcher({fn}, {tr.dims}, status=True" + \
                ("" if status else ", check=False") + with_bounds + ")"
        return f"rt.launcher({fn}, {tr.dims}" + (", status=True" if status else "") + \
            with_bounds + (", prints=True" if prints(tr) else "") + ")"
    if tr.sites:
        return f"rt.checked({fn}, {bounds.bounds_name(n)}" + \
            (", status=True" if status else "") + ")"
    return fn


def has(fns, fname):
    """Whether ``fns`` ([(name, params, body, decorator)]) has a function named ``fname``."""
    return any(f[0] == fname for f in fns)


def spec_lines(kind, tr, relname, target="cpu", fns=()):
    """The lines of the ``FuncSpec`` (``kind`` "func") or ``KernelSpec`` of ``tr`` in a
    module for ``target`` whose functions are ``fns``; ``relname``: the source's name."""
    n = tr.pf.name
    if kind == "func":
        return [f"{n} = adjoint.runtime.FuncSpec(",
                f"    name={n!r},",
                f"    forward={n}_forward,",
                f"    adjoint={n + '_adjoint' if has(fns, n + '_adjoint') else None},",
                f"    jvp={n + '_jvp' if has(fns, n + '_jvp') else None},",
                f"    n_params={len(tr.pf.params)},",
                f"    n_returns={len(tr.return_kinds)},",
                ")"]
    params = []
    for p in tr.pf.params:
        if p.is_array:
            params.append(f"        adjoint.runtime.ParamSpec({p.name!r}, {p.type.dtype.name!r}, "
                          f"{p.type.ndim}),")
        else:
            params.append(f"        adjoint.runtime.ParamSpec({p.name!r}, {p.type.name!r}, 0),")
    if tr.zero_tangents:    # a variant: its JVP alone (emit/module.py kernel_functions)
        forward, backward, jvp = None, None, _launcher(tr, target, fns, "jvp")
    else:
        forward, backward, jvp = (_launcher(tr, target, fns, part)
                                  for part in ("forward", "backward", "jvp"))
    only_jvp = bool(tr.zero_tangents)
    lines = bounds.bounds_lines(tr, relname)
    lines = ([""] if lines else []) + lines + [f"{n} = adjoint.runtime.KernelSpec(",
             f"    name={n!r},",
             "    params=(", *params, "    ),",
             f"    dims={tr.dims},",
             f"    reads={tuple(sorted(tr.reads))!r},",
             f"    writes={tuple(sorted(tr.writes))!r},",
             f"    forward={forward},",
             *_spec_entry("backward", backward),
             *_spec_entry("jvp", jvp),
             *([] if only_jvp else [
                 *_saved_lines(tr, target, fns),
                 *_clean_lines(tr, target, fns),
                 *_zeroed_lines(tr),
                 *_handed_lines(tr, target),
                 *_covered_lines(tr),
                 *_eager_lines(tr, target, fns)]),
             f"    origin={relname + ':' + str(tr.pf.node.lineno)!r},"]
    if target != "cpu":
        lines.append(f"    target={target!r},")
    if tr.sites:
        lines.append(f"    bounds={bounds.bounds_name(n)},")
    lines.append(")")
    return lines


def _saved_lines(tr, target, fns):
    """The ``KernelSpec`` entries of the store policy (optimize/store.py): the arrays
    the forward saves per thread, ``(parameter, dtype)``, and the functions saving and
    reading them; none when no loop is stored."""
    if tr.saved is None or tr.rev.backward is None:
        return []
    f32 = float32_kernel(tr)
    saved = ", ".join(f"({p!r}, {(kind.float32() if f32 else kind).dtype!r})"
                      for p, _, kind in tr.saved.params)
    return [f"    saved=({saved},),",
            f"    forward_save={_launcher(tr, target, fns, 'forward_save')},",
            f"    backward_saved={_launcher(tr, target, fns, 'backward_saved')},"]


def _clean_lines(tr, target, fns):
    """The ``KernelSpec`` entries of pass once: the array parameters whose adjoint the
    backward adds into at most once per element, and the backwards storing into them
    instead (run when all their gradient buffers are clean); none when there are none."""
    if gather_clean(tr) and code(target).host:
        arrays = tuple(r.array[len("adj_"):] for r in tr.gather.receivers)
        lines = [f"    clean_arrays={arrays!r},",
                 f"    backward_clean={_launcher(tr, target, fns, 'backward_clean')},"]
        if tr.rest_clears:
            lines += [f"    rest_clears={tuple(a[len('adj_'):] for a in tr.rest_clears)!r},",
                      f"    backward_norest={_launcher(tr, target, fns, 'backward_norest')},",
                      "    backward_norest_clean="
                      f"{_launcher(tr, target, fns, 'backward_norest_clean')},"]
        return lines
    if tr.once is None or tr.rev.backward is None:
        return []
    arrays = tuple(a[len("adj_"):] for a in tr.once.arrays)
    lines = [f"    clean_arrays={arrays!r},",
             f"    backward_clean={_launcher(tr, target, fns, 'backward_clean')},"]
    if tr.saved is not None:
        lines.append(f"    backward_saved_clean={_launcher(tr, target, fns, 'backward_saved_clean')},")
    return lines


def _zeroed_lines(tr):
    """The ``KernelSpec`` entry of pass zeroed: the array parameters whose adjoint every
    backward leaves all zero when the grid is the array's shape; none when there are none."""
    if not tr.zeroed or tr.rev.backward is None:
        return []
    return [f"    zeroed_arrays={tuple(a[len('adj_'):] for a in tr.zeroed)!r},"]


def _handed_lines(tr, target):
    """The ``KernelSpec`` entry of the zeroed adjoints the backward hands on (its clears of
    them run only if ``rt_clear``, its last argument: emit/module.py); CPU only."""
    if not tr.handed or tr.rev.backward is None or target != "cpu":
        return []
    return [f"    handed_arrays={tuple(a[len('adj_'):] for a in tr.handed)!r},"]


def _covered_lines(tr):
    """The ``KernelSpec`` entry of pass cover: the array parameters whose adjoint a storing
    backward writes at every element, with the extents that must be the array's shape
    (runtime/owed.py); none when there are none."""
    if not tr.covered or tr.rev.backward is None:
        return []
    return [f"    covered_arrays={tr.covered!r},"]


def _eager_lines(tr, target, fns):
    """The ``KernelSpec`` entries of pass eager: the forward running its VJP too, the
    output whose adjoint it reads, and the arrays whose adjoints it stores into; CPU only
    (none where the kernel has no such launch)."""
    if tr.eager is None or not has(fns, f"{tr.pf.name}_forward_vjp"):
        return []
    stored = tuple(a[len("adj_"):] for a in tr.eager.stored)
    return [f"    forward_vjp={_launcher(tr, target, fns, 'forward_vjp')},",
            f"    vjp_seeded={tr.eager.seeded!r},",
            f"    vjp_stored={stored!r},"]


def _spec_entry(key, value):
    """The lines of one ``KernelSpec`` argument: ``value`` as an expression, or a
    ``(what, why)`` refusal spelled ``rt.unavailable(what, why)`` over several lines."""
    if not isinstance(value, tuple):
        return [f"    {key}={value},"]
    what, why = value
    return [f"    {key}=rt.unavailable(", f"        {what!r},", f"        {why!r},", "    ),"]
