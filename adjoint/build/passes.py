"""The ordered list of passes: what each reads and makes, and which only make code faster.

A *core* pass defines the derivative: with every optimization off, the core passes
alone give the plain rule-by-rule forward, backward and JVP (the code to read when
learning). An *optimization* pass only makes code faster: it may add a variant the
runtime chooses when its proof holds (``store``, ``once``, ``gather``, ``eager``), note
facts the runtime uses to skip work (``zeroed``, ``cover``), or rewrite a body so it
computes the same values in fewer operations (``prune``, ``order``, ``reciprocal``,
``scale``, and at emit time ``firsts``, ``sums``, ``jam``). Each says whether its
results are the same bit for bit (``exact``) or how they may round differently; the
tests and the fuzzer run every kernel with the optimizations on and off and compare
(tests/conftest.py, benchmarks/fuzz).

Which optimizations run (``enabled``): ``ADJOINT_OPTIMIZE`` (unset or ``1``: all;
``0``: none; ``-scale,-jam``: all but those; ``0,+scale``: only those; read once, at
the process's first launch or transform), the kernel's
``@ad.kernel(optimize=...)`` (``True``, ``False`` or such a string: both must allow a
pass) and, for one thread of code, ``optimizing(...)`` (in place of the environment).

This module imports nothing of the transformer: the runtime-facing code (api, inputs)
asks it which optimizations are on without loading gast.
"""
import contextvars
import os
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """One pass of the pipeline (adjoint/build/pipeline.py runs the transform ones in order)."""
    name: str
    module: str             # where it lives (its docstring is its contract)
    reads: tuple            # the Transformed fields (or inputs) it reads
    makes: tuple            # the Transformed fields it makes or rewrites
    optimization: bool = False
    stage: str = "transform"    # "transform": pipeline.transform runs it; "emit": emit/ does
    exact: bool = True      # optimizations: the same values, bit for bit (see ``rounding``)
    rounding: str = ""      # where not exact: how results may differ
    rounds: tuple = ("values", "gradients", "tangents")     # ... and which results
    roles: tuple = ("kernel", "func")
    summary: str = ""

    @property
    def kind(self):
        return "optimization" if self.optimization else "core"


_P = Pass
PASSES = (
    _P("parse", "frontend/parse.py", ("source",), ("pf",),
       summary="the user's source as a tree; globals, funcs and math names resolved"),
    _P("unroll", "frontend/unroll.py", ("pf",), ("pf",), optimization=True,
       summary="a small constant-range loop whose variable indexes vector components, "
               "written out once per iteration"),
    _P("scalarize", "frontend/scalarize.py", ("pf",), ("pf",),
       summary="vector, matrix, quaternion and struct code expanded into scalars"),
    _P("fence", "frontend/fence.py", ("pf",), ("pf",),
       summary="what is not supported refused, naming file, line and construct"),
    _P("normalize", "derive/normalize.py", ("pf",), ("norm",),
       summary="desugared, one operation per statement (A-normal form)"),
    _P("inline", "derive/inline.py", ("norm",), ("norm",),
       summary="calls of funcs that take arrays replaced by their bodies"),
    _P("types", "derive/types.py", ("norm",), ("kinds", "return_kinds"),
       summary="the type of every value"),
    _P("ssa", "derive/ssa.py", ("norm", "kinds"), ("ssa",),
       summary="every name assigned once; explicit copies; loop-carried values listed"),
    _P("grid", "derive/parallel.py", ("ssa",), ("dims", "threads"),
       summary="the grid's dimensions and the names holding each thread index"),
    _P("hazards", "derive/hazards.py", ("ssa", "dims", "threads"), ("reads", "writes"),
       summary="in-kernel overwrites a replay could not see refused; arrays read and written"),
    _P("activity", "derive/activity.py", ("ssa",), ("active",),
       summary="the values that depend on differentiable inputs and reach outputs"),
    _P("bounds", "derive/bounds.py", ("ssa", "dims", "threads"), ("checked", "sites"),
       summary="every array index checked (once per launch, loop or use)"),
    _P("reverse", "derive/reverse.py", ("checked", "active"), ("rev",),
       summary="the forward and the backward: replay, then each rule's adjoint in reverse"),
    _P("jvp", "derive/jvp.py", ("checked", "active"), ("tangent",),
       summary="forward mode: each rule's tangent after its primal"),
    _P("parallel", "derive/parallel.py", ("ssa", "dims", "threads", "tangent"), ("plans",),
       roles=("kernel",),
       summary="how each part's threads may run at once (parallel, privatize, color, serial)"),
    # ---- optimizations: each can be turned off; results compared with it off
    _P("zero_tangents", "optimize/zero_tangents.py",
       ("ssa", "checked", "writes", "plans", "tangent"), ("tangent", "plans"),
       optimization=True, roles=("kernel",), exact=False, rounds=("tangents",),
       rounding="a rule with an operand held constant takes its one-operand form "
                "(x / c: dot_x / c; c / x: -(dot_x / x) * q), which may round otherwise "
                "than the two-operand form given a zero; where a dropped partial is inf "
                "or nan, zeros give 0 * inf = nan and this the derivative along the rest",
       summary="the JVP of a launch given no tangent for arrays it only reads, their "
               "terms left out (api.Kernel.with_zero_tangents)"),
    _P("prune", "derive/prune.py", ("rev",), ("rev",), optimization=True,
       summary="replay code whose values the backward never reads left out"),
    _P("order", "derive/order.py", ("rev",), ("rev",), optimization=True, exact=False,
       rounding="a loop whose iterations' adjoints are independent is reversed in forward "
                "order: its sums add the same terms in another order",
       summary="a loop with independent iterations reversed walking memory forward"),
    _P("store", "optimize/store.py", ("checked", "active", "rev", "dims"), ("saved",),
       optimization=True, roles=("kernel",),
       summary="a loop the backward would replay only for its results: the forward saves them"),
    _P("reciprocal", "optimize/reciprocal.py", ("tangent", "rev", "saved"),
       ("tangent", "rev", "saved"), optimization=True, exact=False,
       rounding="X / d becomes X * (1 / d) for a root d: one more rounding (an ulp or so)",
       summary="divisions by one root multiply by its inverse"),
    _P("scale", "optimize/scale.py", ("tangent", "rev", "saved"), ("tangent", "rev", "saved"),
       optimization=True,
       summary="powers of two that rules multiply by and then divide by again left out"),
    _P("once", "optimize/once.py", ("rev", "saved", "dims"), ("once",), optimization=True,
       roles=("kernel",),
       summary="a backward storing into clean gradients it adds into at most once an element"),
    _P("gather", "optimize/gather.py", ("rev", "checked", "dims", "threads", "plans"),
       ("gather",), optimization=True, roles=("kernel",), exact=False,
       rounding="each gradient element sums what its senders add in another order",
       summary="a stencil's backward as each gradient element gathering its own sum"),
    _P("zeroed", "optimize/zeroed.py", ("rev", "saved", "once", "gather", "plans", "dims"),
       ("zeroed", "rest_clears", "handed"), optimization=True, roles=("kernel",),
       summary="the gradients every backward leaves zero, and those it hands on"),
    _P("cover", "optimize/cover.py", ("once", "gather", "plans", "dims"), ("covered",),
       optimization=True, roles=("kernel",),
       summary="the gradients a storing backward writes whole (their zero never written)"),
    _P("eager", "optimize/eager.py", ("rev", "reads", "writes", "plans", "once"), ("eager",),
       optimization=True, roles=("kernel",), exact=False,
       rounding="a loss's gradient is g * J, J computed for a seed of 1: one more rounding "
                "where the seed g is not 1",
       summary="a one-element loss's forward and vector-Jacobian product in one launch"),
    _P("firsts", "emit/firsts.py", ("rev", "tangent"), ("emitted",), optimization=True,
       stage="emit", summary="an adjoint's first add spelled as its assignment"),
    _P("sums", "emit/sums.py", ("plans",), ("emitted",), optimization=True, stage="emit",
       roles=("kernel",), exact=False,
       rounding="a chunk's sum starts from zero in a local (straight-line threads: in eight "
                "lanes, added at the end) and is then added to the element: the terms are "
                "added in another order than the threads' own adds",
       summary="a privatized one-element sum kept in a local, stored once a chunk"),
    _P("jam", "emit/jam.py", ("plans",), ("emitted",), optimization=True, stage="emit",
       roles=("kernel",), exact=False,
       rounding="two threads' adds into one private element are one add (a + b)",
       summary="two threads a pass through a loop they share"),
    _P("warp_sums", "emit/warp.py", ("emitted",), ("emitted",), optimization=True,
       stage="emit", roles=("kernel",), exact=False, rounds=(),
       rounding="on a GPU only: the adds of a warp's 32 lanes into one element are summed "
                "as a tree and added once, not one at a time in the order the lanes arrive "
                "(the CPU targets and numba's simulator run each thread's own add: the same "
                "bits there)",
       summary="CUDA: an atomic add every lane of a warp makes into one element, summed "
               "across the warp and added once"),
)
BY_NAME = {p.name: p for p in PASSES}
OPTIMIZATIONS = tuple(p.name for p in PASSES if p.optimization)
ALL = frozenset(OPTIMIZATIONS)
NONE = frozenset()
ENV = "ADJOINT_OPTIMIZE"

_override = contextvars.ContextVar("adjoint_optimize", default=None)
_parsed = {}


def parse_setting(text, where=ENV):
    """The optimizations ``text`` enables (module docstring); a ValueError naming the
    passes for a name that is none."""
    if text is None:
        return ALL
    if isinstance(text, bool):
        return ALL if text else NONE
    if not isinstance(text, str):       # an iterable of names: exactly those
        names = set(text)
        _known(names, where)
        return frozenset(names)
    got = _parsed.get((text, where))
    if got is not None:
        return got
    items = [t.strip() for t in text.split(",") if t.strip()]
    enabled = set(ALL)
    for k, item in enumerate(items):
        if item in ("1", "on", "all", "true", "True"):
            enabled = set(ALL)
        elif item in ("0", "off", "none", "false", "False"):
            enabled = set()
        elif item[0] in "+-":
            _known({item[1:]}, where)
            (enabled.add if item[0] == "+" else enabled.discard)(item[1:])
        elif k == 0:                    # "scale,jam": only those
            _known({item}, where)
            enabled = {item}
        else:
            _known({item}, where)
            enabled.add(item)
    got = _parsed[(text, where)] = frozenset(enabled)
    return got


def _known(names, where):
    unknown = sorted(set(names) - ALL)
    if unknown:
        core = [n for n in unknown if n in BY_NAME]
        why = (f"{', '.join(core)} {'is a core pass' if len(core) == 1 else 'are core passes'}"
               " (it defines the derivative and cannot be turned off)" if core else
               f"no optimization pass is named {', '.join(map(repr, unknown))}")
        raise ValueError(f"{where}: {why}; the optimization passes are "
                         f"{', '.join(OPTIMIZATIONS)}")


_from_environment = []     # ADJOINT_OPTIMIZE's setting, read once (``from_environment``)


def from_environment():
    """``ADJOINT_OPTIMIZE``'s setting, read at the first launch or transform of the process
    (as numba reads its ``NUMBA_*`` variables once): a launch does not pay for reading
    the environment. ``optimizing`` changes it for a block of code."""
    if not _from_environment:
        _from_environment.append(parse_setting(os.environ.get(ENV)))
    return _from_environment[0]


def current():
    """The optimizations enabled here: ``optimizing(...)``'s, else ``ADJOINT_OPTIMIZE``'s."""
    over = _override.get()
    if over is not None:
        return over
    return _from_environment[0] if _from_environment else from_environment()


@contextmanager
def optimizing(setting):
    """Run the block (this thread and context only) with ``setting`` in place of
    ``ADJOINT_OPTIMIZE``: ``True``, ``False``, a string as the variable takes, or names."""
    token = _override.set(parse_setting(setting))
    try:
        yield
    finally:
        _override.reset(token)


def setting_text(enabled):
    """``enabled`` as ``ADJOINT_OPTIMIZE`` spells it, which ``parse_setting`` reads back:
    ``1`` (all), ``0`` (none), else the optimizations turned off (``-scale,-jam``)."""
    if enabled == ALL:
        return "1"
    if not enabled:
        return "0"
    return ",".join(f"-{n}" for n in OPTIMIZATIONS if n not in enabled)


def describe(enabled):
    """A short text naming ``enabled`` (all, none, or what differs from all)."""
    if enabled == ALL:
        return "all optimizations"
    if not enabled:
        return "no optimizations (ADJOINT_OPTIMIZE=0)"
    off = [n for n in OPTIMIZATIONS if n not in enabled]
    return "optimizations on but " + ", ".join(off)


def rounding(applied):
    """Whether results with the optimizations ``applied`` may differ from the plain code's
    only bit for bit (True) or by rounding (False)."""
    return all(BY_NAME[n].exact for n in applied)
