"""The grid function of a kernel part: the loop over threads its parallel plan asks for.

Expects: the thread function's name, the thread-index and dimension names, the other
arguments, and a ``Plan`` (derive/parallel.py). Guarantees: ``grid`` gives the body
(and decorator) running the thread function for every thread -- serially, in parallel
(``prange``), in per-chunk private copies summed at the end, in two colored phases of
row blocks, or (``gathered``) as receivers gathering sums -- and ``small`` the serial
body of a small launch; the same input always gives the same tree.
"""
import copy

import gast

from ..derive.ir import assign, comment, const, name, rt_call, unique

DECORATOR = "@rt.jit"


def small(thread_fn, tids, dims, args, sums=()):
    """Body of ``<kernel>_<part>_small`` (``@rt.jit_small``): every thread of a small launch,
    one after another (``rt.by_size`` runs it below ``rt.PARALLEL_MIN_THREADS`` threads'
    worth of work).
    A function of its own, compiled on its first call: a process that makes only small launches (or only
    large ones) compiles only the serial loop (or only the parallel one). ``sums``
    (emit/sums.py): elements kept in locals of the thread function, as one chunk of
    the grid keeps them, added to their arrays at the end."""
    loops = [(t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
             for t, d in zip(tids, dims)]
    note = comment("a small launch runs serially: starting threads would cost more")
    if not sums:
        return [note] + nest(loops, thread_fn, [name(a) for a in tids + args])
    body = [note] + [assign(s.local, rt_call("zero_of", name(s.array)), None) for s in sums]
    body += nest(loops, thread_fn, [name(a) for a in tids + args] + [name(s.local) for s in sums],
                 _results(sums))
    for s in sums:
        body.append(gast.If(test=s.inside(), body=[gast.AugAssign(
            target=s.element(store=True), op=gast.Add(), value=name(s.local))], orelse=[]))
    return body


def _at(array, index, store=False):
    return gast.Subscript(value=name(array), slice=index,
                          ctx=gast.Store() if store else gast.Load())


def _results(sums):
    """The assignment target of a thread function's returned ``sums``."""
    if len(sums) == 1:
        return name(sums[0].local, store=True)
    return gast.Tuple(elts=[name(s.local, store=True) for s in sums], ctx=gast.Store())


def grid(thread_fn, tids, dims, args, plan, backward, sums=(), pair=None, lanes=False):
    """Body and decorator of a grid function running ``thread_fn`` for every thread
    (a parallel plan's small launches run ``_small`` instead). ``sums`` (emit/sums.py,
    privatize plans only): elements the thread function keeps in locals; with ``lanes``
    (a thread body LLVM may vectorize across threads: ``sums.straight``), each chunk runs
    the threads of each row of the last dimension in blocks, each thread's sums added
    into lanes (``_in_lanes``). ``pair`` (emit/jam.py, parallel and privatize plans of
    1-D grids only): the function running two threads together, which each chunk runs
    for its threads two by two (a parallel plan with one then runs in chunks too)."""
    taken = set(args) | set(tids) | set(dims) | {s.local for s in sums}

    def fresh(base):
        return unique(taken, base)

    call_args = [name(a) for a in tids + args]
    # parallel loops hand the thread code the row index through rt.signed: prange's index
    # is unsigned, and a row from range(chunk_start(...), ...) is not known to be >= 0
    # (numba then wraps every index it meets; see backend_numba.signed)
    parallel_args = [rt_call("signed", a) if a.id == tids[0] else a for a in call_args]
    if plan.mode == "serial":
        note = comment(f"threads run one after another{' in reverse order' if backward else ''}: "
                       f"{plan.reason}")
        loops = []
        for t, d in zip(tids, dims):
            rng = [gast.BinOp(left=name(d), op=gast.Sub(), right=const(1)), const(-1), const(-1)] \
                if backward else [name(d)]
            loops.append((t, gast.Call(func=name("range"), args=rng, keywords=[])))
        return [note] + nest(loops, thread_fn, call_args), DECORATOR
    if plan.mode == "parallel" and pair is None:
        note = comment("each thread writes only its own elements: threads run in parallel "
                       "(rt.signed: numba's prange index is unsigned)")
        loops = [(tids[0], rt_call("prange", name(dims[0])))] + [
            (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
            for t, d in zip(tids[1:], dims[1:])]
        return [note] + nest(loops, thread_fn, parallel_args), "@rt.jit_grid"
    if plan.mode == "color":
        return colored(thread_fn, tids, dims, parallel_args, plan, fresh), "@rt.jit_grid"
    n_chunks, chunk = fresh("n_chunks"), fresh("chunk")
    summed = {s.array for s in sums}
    copies = {a: fresh(f"{a}_chunks") for a in plan.private if a not in summed}
    sum_chunks = {s.local: fresh(f"{s.local}_chunks") for s in sums}
    body = []
    if plan.mode == "parallel":     # (with a pair function)
        body.append(comment("each thread writes only its own elements: chunks of threads run "
                            "in parallel"))
    if copies:
        what = ", ".join(repr(a) for a in copies)
        body.append(comment(f"{what} may be accumulated by several threads: each chunk of "
                            "threads adds into its own zeroed copy, and the copies are summed "
                            "at the end (no races)"))
    if sums:
        what = ", ".join(_spelled(s) for s in sums)
        arrays = ", ".join(repr(a) for a in sorted(summed))
        body.append(comment(f"{what} may be accumulated by several threads, and {arrays} "
                            f"{'is' if len(summed) == 1 else 'are'} not otherwise used: each "
                            "chunk of threads sums into a local (a register), stored once, and "
                            "the chunks' sums are added at the end (no races)"))
    body.append(assign(n_chunks, rt_call("chunk_count", name(dims[0])), None))
    body += [assign(c, rt_call("private_copies", name(a), name(n_chunks)), None)
             for a, c in copies.items()]
    body += [assign(sum_chunks[s.local], rt_call("chunk_sums", name(s.array), name(n_chunks)),
                    None) for s in sums]
    call_args = [gast.Subscript(value=name(copies[a.id]), slice=name(chunk), ctx=gast.Load())
                 if isinstance(a, gast.Name) and a.id in copies else a for a in parallel_args]
    call_args += [name(s.local) for s in sums]
    start = rt_call("chunk_start", name(dims[0]), name(n_chunks), name(chunk))
    stop = rt_call("chunk_start", name(dims[0]), name(n_chunks),
                    gast.BinOp(left=name(chunk), op=gast.Add(), right=const(1)))
    rows = [(tids[0], gast.Call(func=name("range"), args=[start, stop], keywords=[]))] + [
        (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
        for t, d in zip(tids[1:], dims[1:])]
    if lanes and sums:
        inner = _in_lanes(thread_fn, sums, tids, dims, start, stop, call_args[:-len(sums)],
                          sum_chunks, chunk, fresh)
    else:
        inner = [assign(s.local, _at(sum_chunks[s.local], name(chunk)), None) for s in sums]
        if pair is not None:
            inner += _in_pairs(thread_fn, pair, tids[0], start, stop, call_args[1:], fresh,
                               _results(sums) if sums else None)
        else:
            inner += nest(rows, thread_fn, call_args, _results(sums) if sums else None)
    inner += [assign(_at(sum_chunks[s.local], name(chunk), store=True), name(s.local), None)
              for s in sums]
    body.append(gast.For(target=name(chunk, store=True), iter=rt_call("prange", name(n_chunks)),
                         body=inner, orelse=[], type_comment=None))
    body += [gast.Expr(value=rt_call("add_chunks", name(a), name(c))) for a, c in copies.items()]
    for s in sums:
        body.append(gast.If(test=s.inside(), body=[assign(s.element(store=True), rt_call(
            "add_sums", s.element(), name(sum_chunks[s.local])), None)], orelse=[]))
    return body, "@rt.jit_grid"


def _in_lanes(thread_fn, sums, tids, dims, start, stop, call_args, sum_chunks, chunk, fresh):
    """A chunk's threads (rows ``start`` to ``stop`` of the grid) for a thread function
    keeping ``sums`` in locals, the threads of each row of the grid's last dimension in
    blocks of ``rt.SUM_BLOCK`` (a 1-D grid: the chunk's threads): each thread runs from
    partial sums of -0.0 (``-0.0 + v`` is ``v``, bit for bit; an integer's zero is 0)
    and its results are stored in the block, whose values are then added into
    ``SUM_LANES`` partial sums per element (runtime/helpers.py ``add_lanes``), added to
    the chunk's sum at the end. ``call_args``: the thread function's arguments but the
    sums (the thread indices first).

    Why: a thread loop carrying a sum from one thread to the next is not vectorized
    (LLVM keeps the additions in order: reordering them would change the rounding);
    the block loop carries nothing (a loop of threads calling ``sin`` calls libmvec's
    vector ``sin``, runtime/simd.py), and the lanes are eight independent sums, added
    once per block. The order of the additions is fixed by the code, not by the
    compiler: the same on every machine, in a forward and in its JVP."""
    lo, hi, first, count, k = (fresh(n) for n in ("lo", "hi", "first", "count", "k"))
    zeros = {s.local: fresh(f"{s.local}_zero") for s in sums}
    lanes = {s.local: fresh(f"{s.local}_lanes") for s in sums}
    blocks = {s.local: fresh(f"{s.local}_block") for s in sums}
    what = ", ".join(_spelled(s) for s in sums)
    row = "the chunk's threads" if len(tids) == 1 else "each row's threads"
    body = [comment(f"{row} in blocks of rt.SUM_BLOCK, each adding to {what} from -0.0 "
                    "(which adds nothing): the block's values are then added into eight "
                    "partial sums (value k into sum k % 8), in a fixed order (the thread "
                    "loop vectorizes)")]
    body += [assign(lo, start, None), assign(hi, stop, None)] if len(tids) == 1 else []
    for s in sums:
        body += [assign(zeros[s.local], gast.UnaryOp(op=gast.USub(), operand=rt_call(
                     "zero_of", name(s.array))), None),
                 assign(lanes[s.local], rt_call("zero_lanes", name(s.array)), None),
                 assign(blocks[s.local], rt_call("lane_block", name(s.array)), None)]
    tid = gast.BinOp(left=name(first), op=gast.Add(), right=name(k))
    args = copy.deepcopy(call_args)
    args[len(tids) - 1] = rt_call("signed", tid) if len(tids) == 1 else tid
    call = gast.Call(func=name(thread_fn), args=args + [name(zeros[s.local]) for s in sums],
                     keywords=[])
    per_thread = [gast.Assign(targets=[_results(sums)], value=call, type_comment=None)]
    per_thread += [assign(_at(blocks[s.local], name(k), store=True), name(s.local), None)
                   for s in sums]
    begin, end = (name(lo), name(hi)) if len(tids) == 1 else (const(0), name(dims[-1]))
    block = [assign(count, rt_call("block_size", name(first), copy.deepcopy(end)), None),
        gast.For(target=name(k, store=True), iter=_range(name(count)), body=per_thread,
                 orelse=[], type_comment=None)]
    block += [assign(lanes[s.local], rt_call("add_lanes", name(lanes[s.local]),
                                             name(blocks[s.local]), name(count)), None)
              for s in sums]
    loop = [gast.For(target=name(first, store=True), iter=_range(
        begin, end, gast.Attribute(value=name("rt"), attr="SUM_BLOCK", ctx=gast.Load())),
        body=block, orelse=[], type_comment=None)]
    # the rows around it: the chunk's rows of the first dimension, every row of the others
    outer = [(tids[0], _range(start, stop))] + [(t, _range(name(d)))
                                                for t, d in zip(tids[1:-1], dims[1:-1])]
    for target, it in reversed(outer if len(tids) > 1 else []):
        loop = [gast.For(target=name(target, store=True), iter=it, body=loop, orelse=[],
                         type_comment=None)]
    body += loop
    body += [assign(s.local, rt_call("lanes_total", _at(sum_chunks[s.local], name(chunk)),
                                     name(lanes[s.local])), None) for s in sums]
    return body


def _in_pairs(thread_fn, pair, tid, start, stop, rest, fresh, results=None):
    """A chunk's threads ``start`` to ``stop`` two by two through ``pair``, and the last
    one alone (an odd count) through ``thread_fn``; ``results``: the target the calls'
    returned sums are assigned to (emit/sums.py), if any."""
    lo, hi = fresh("lo"), fresh("hi")

    def call(fn, *tids):
        made = gast.Call(func=name(fn), args=[rt_call("signed", t) for t in tids]
                         + copy.deepcopy(rest), keywords=[])
        if results is None:
            return gast.Expr(value=made)
        return gast.Assign(targets=[copy.deepcopy(results)], value=made, type_comment=None)

    def plus(a, b, op=gast.Add):
        return gast.BinOp(left=a, op=op(), right=b)
    twos = gast.For(target=name(tid, store=True), iter=gast.Call(
        func=name("range"), args=[name(lo), plus(name(hi), const(1), gast.Sub), const(2)],
        keywords=[]), body=[call(pair, name(tid), plus(name(tid), const(1)))], orelse=[],
        type_comment=None)
    odd = gast.Compare(left=plus(plus(name(hi), name(lo), gast.Sub), const(2), gast.Mod),
                       ops=[gast.Eq()], comparators=[const(1)])
    return [comment(f"two threads at a time ({pair}: emit/jam.py), the last one alone"),
            assign(lo, start, None), assign(hi, stop, None), twos,
            gast.If(test=odd, body=[call(thread_fn, plus(name(hi), const(1), gast.Sub))],
                    orelse=[])]


def _spelled(s):
    """``loss[0]``: a sum's element as the user wrote it."""
    return f"{s.array}[{', '.join(str(c) for c in s.index)}]"


def colored(thread_fn, tids, dims, call_args, plan, fresh):
    """Two parallel phases over blocks of rows (see derive/parallel.py, mode color)."""
    n_blocks, phase, pair, block = fresh("n_blocks"), fresh("phase"), fresh("pair"), fresh("block")
    what = ", ".join(repr(a) for a in plan.private)
    note = comment(f"{what} may be updated by several threads, but only at rows within "
                   f"{plan.radius} of the thread's own: rows are split into blocks at least "
                   f"{2 * plan.radius} high; even blocks run in parallel, then odd blocks (no races)")
    count = assign(n_blocks, rt_call("block_count", name(dims[0]), const(plan.radius)), None)
    first = gast.BinOp(left=gast.BinOp(left=const(2), op=gast.Mult(), right=name(pair)),
                       op=gast.Add(), right=name(phase))
    pairs = gast.BinOp(left=gast.BinOp(left=name(n_blocks), op=gast.Add(),
                                       right=gast.BinOp(left=const(1), op=gast.Sub(),
                                                        right=name(phase))),
                       op=gast.FloorDiv(), right=const(2))
    start = rt_call("chunk_start", name(dims[0]), name(n_blocks), name(block))
    stop = rt_call("chunk_start", name(dims[0]), name(n_blocks),
                    gast.BinOp(left=name(block), op=gast.Add(), right=const(1)))
    rows = [(tids[0], gast.Call(func=name("range"), args=[start, stop], keywords=[]))] + [
        (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
        for t, d in zip(tids[1:], dims[1:])]
    inner = [assign(block, first, None)] + nest(rows, thread_fn, call_args)
    pair_loop = gast.For(target=name(pair, store=True), iter=rt_call("prange", pairs), body=inner,
                         orelse=[], type_comment=None)
    phase_loop = gast.For(target=name(phase, store=True),
                          iter=gast.Call(func=name("range"), args=[const(2)], keywords=[]),
                          body=[pair_loop], orelse=[], type_comment=None)
    return [note, count, phase_loop]


def gathered(receivers, rest, tids, dims, params):
    """Body of the grid function of a backward that pass gather rewrote: for each
    ``(thread function, array, element names, their dimensions, tests)`` of
    ``receivers``, every element of that array in parallel (each writes only its own
    element), then ``rest`` (None: nothing left to run) for every thread in parallel."""
    what = ", ".join(repr(a) for _, a, _, _, _ in receivers)
    body = [comment(f"each element of {what} gathers the sum of what the threads add to it "
                    "(optimize/gather.py): one parallel pass over its rows"
                    + (", then the rest of each thread's backward (its own elements only)"
                       if rest else ""))]
    for fn, array, elements, along, _ in receivers:
        loops = [(elements[0], rt_call("prange", name(along[0])))] + [
            (e, _range(name(d))) for e, d in zip(elements[1:], along[1:])]
        args = [rt_call("signed", name(elements[0]))] + [name(e) for e in elements[1:]] + \
            [name(a) for a in dims + params]
        body += nest(loops, fn, args)
    if rest is not None:
        loops = [(tids[0], rt_call("prange", name(dims[0])))] + [
            (t, _range(name(d))) for t, d in zip(tids[1:], dims[1:])]
        args = [rt_call("signed", name(tids[0]))] + [name(a) for a in tids[1:] + params]
        body += nest(loops, rest, args)
    return body


def choose(receivers, gathered_fn, planned_fn, dims, params, zero_first=False):
    """Body of the (plain Python) function a gathered backward is launched through: the
    gathered grid when each array's shape is the launch's grid and the receivers' tests
    hold, else the plan's grid (each compiled on its first call). ``zero_first``: the
    receivers store into clean gradients, which may owe their zeros (runtime/owed.py);
    the plan's grid adds into them, so it writes those zeros first."""
    same = []
    for _, array, elements, along, requires in receivers:
        same += [gast.Compare(left=gast.Subscript(
            value=gast.Attribute(value=name(array), attr="shape", ctx=gast.Load()),
            slice=const(k), ctx=gast.Load()), ops=[gast.Eq()], comparators=[name(d)])
            for k, d in enumerate(along)] + requires
    args = [name(a) for a in dims + params]
    note = comment("the gathered grid where each gathered array's shape is the launch's grid "
                   "(and a ring is larger than the stencil), else the plan's grid; each is "
                   "compiled on its first call")
    test = same[0] if len(same) == 1 else gast.BoolOp(op=gast.And(), values=same)
    zeros = [gast.Expr(value=rt_call("zero_fill", name(array)))
             for _, array, _, _, _ in receivers] if zero_first else []
    return [note, gast.If(test=test, body=[gast.Expr(value=gast.Call(
        func=name(gathered_fn), args=args, keywords=[]))], orelse=zeros + [gast.Expr(
            value=gast.Call(func=name(planned_fn), args=copy.deepcopy(args), keywords=[]))])]


def _range(*args):
    return gast.Call(func=name("range"), args=list(args), keywords=[])


def nest(loops, thread_fn, call_args, results=None):
    """``loops`` around a call of ``thread_fn`` (assigned to ``results``, when given)."""
    call = gast.Call(func=name(thread_fn), args=call_args, keywords=[])
    body = [gast.Expr(value=call) if results is None else
            gast.Assign(targets=[results], value=call, type_comment=None)]
    for target, it in reversed(loops):
        body = [gast.For(target=name(target, store=True), iter=it, body=body, orelse=[],
                         type_comment=None)]
    return body
