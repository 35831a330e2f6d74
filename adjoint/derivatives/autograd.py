"""Jacobians and gradient checks: the kernel's backward against finite differences.

``jacobian`` builds each block ``CHUNK`` columns at a time from vector-mode JVP
launches (one-hot input tangents, adjoint/derivatives/vector_mode.py), or row by row from backward
launches (one-hot output adjoint) for a kernel without a JVP; ``gradcheck`` checks the
backward's rows; ``jacobian_fd`` builds it column by column from central
differences of forward launches. Neither touches the caller's arrays: every
launch runs on private copies, and nothing is recorded on an active tape.

Keys are ``(input index, output index)``: positions in ``inputs`` and in
``outputs``. A block has shape (output size, input size), over flattened
arrays. Only float arrays have blocks; scalars and integer arrays are passed
through unchanged.
"""
from dataclasses import dataclass
from functools import partial

import numpy as np

from ..api import Kernel
from ..errors import AdjointError, LaunchError
from ..runtime import array as _array
from ..runtime import buffers
from ..runtime.array import Array
from ..runtime.launch import launch
from ..runtime.steps import LaunchStep

CHUNK = 16
"""Directions per vector-mode launch of ``jacobian`` and of ``hvp``'s columns."""

__all__ = ["jacobian", "jacobian_fd", "gradcheck", "gradcheck_tape", "GradcheckError", "hvp"]


class GradcheckError(AdjointError, AssertionError):
    """The backward pass disagrees with finite differences; the message is the report."""


@dataclass
class Problem:
    """One launch to differentiate: which argument positions are inputs and outputs.

    ``args`` are host copies (numpy arrays and scalars); each launch runs on
    fresh ``Array``s on ``device`` and its results are read back to the host."""
    kernel: object          # Kernel or KernelSpec (anything with ``.spec``)
    dims: object
    args: list              # numpy arrays and scalars, the launch's values (never mutated)
    n_inputs: int
    in_params: list         # argument positions of differentiable inputs
    out_params: list        # argument positions of differentiable outputs
    device: str = "cpu"

    @property
    def spec(self):
        return self.kernel.spec

    def name(self, pos):
        return self.spec.params[pos].name

    def fresh_args(self):
        return [a.copy() if isinstance(a, np.ndarray) else a for a in self.args]

    def _launch(self, host_args, host_adjs=None):
        """Launch on ``device``; copy every array back into the host lists."""
        dev = [_on_device(a, self.device) for a in host_args]
        adj = None if host_adjs is None else [_on_device(a, self.device) for a in host_adjs]
        n = self.n_inputs
        if adj is None:
            launch(self.kernel, self.dims, inputs=dev[:n], outputs=dev[n:], device=self.device,
                   record_tape=False)
        else:
            launch(self.kernel, self.dims, inputs=dev[:n], outputs=dev[n:], device=self.device,
                   adjoint=True, adj_inputs=adj[:n], adj_outputs=adj[n:], record_tape=False)
        for hosts, devs in ((host_args, dev), (host_adjs or [], adj or [])):
            for h, d in zip(hosts, devs):
                if isinstance(d, Array) and d.device != "cpu":
                    h[...] = d.numpy()

    def run(self, args):
        self._launch(args)

    def adjoint(self, args, adjs):
        self._launch(args, adjs)


def _on_device(value, device):
    """An ``Array`` on ``device`` for a host array (sharing it on the CPU); scalars as they are."""
    if not isinstance(value, np.ndarray):
        return value
    return Array(value, device=device, _owned=True)


def _host(value):
    """A host copy of an array argument or buffer; scalars as they are."""
    if isinstance(value, Array):
        return np.array(value.numpy())
    if isinstance(value, np.ndarray):
        return np.array(value)
    if hasattr(value, "copy_to_host"):
        return buffers.to_host(value)       # (after a pending CUDA launch's fault)
    return value


def _device(args):
    for a in args:
        if isinstance(a, Array):
            return a.device
    return getattr(_array, "default_device", lambda: "cpu")()


def _differentiable(spec, args, positions):
    return [k for k in positions if spec.params[k].has_adjoint and isinstance(args[k], np.ndarray)]


def _problem(kernel, dim, inputs, outputs):
    spec = kernel.spec
    args = [_host(a) for a in list(inputs) + list(outputs)]
    if len(args) != len(spec.params):
        launch(kernel, dim, inputs=inputs, outputs=outputs, record_tape=False)  # raises the error
    n = len(inputs)
    return Problem(kernel, dim, args, n, _differentiable(spec, args, range(n)),
                   _differentiable(spec, args, range(n, len(args))),
                   _device(list(inputs) + list(outputs)))


def _resolve(problem, entry, which):
    """A mask entry (name or index into inputs/outputs) -> argument position."""
    spec = problem.spec
    first, count = (0, problem.n_inputs) if which == "input" else \
        (problem.n_inputs, len(problem.args) - problem.n_inputs)
    names = [spec.params[k].name for k in range(first, first + count)]
    if isinstance(entry, str):
        if entry not in names:
            raise ValueError(f"kernel '{spec.name}' has no {which} named '{entry}' "
                             f"({which}s: {', '.join(names)})")
        pos = first + names.index(entry)
    elif isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
        if not 0 <= entry < count:
            raise ValueError(f"{which} index {entry} is out of range: kernel '{spec.name}' "
                             f"was given {count} {which}s ({', '.join(names)})")
        pos = first + int(entry)
    else:
        raise TypeError(f"input_output_mask entries are names or integer indices, not {entry!r}")
    if pos not in (problem.in_params if which == "input" else problem.out_params):
        raise ValueError(f"{which} '{spec.params[pos].name}' of kernel '{spec.name}' has no "
                         "gradient (only float arrays do)")
    return pos


def _pairs(problem, mask):
    """``[(key, in_pos, out_pos)]`` with key = (input index, output index)."""
    n = problem.n_inputs
    if mask is None:
        pairs = [(i, o) for i in problem.in_params for o in problem.out_params]
    else:
        pairs = [(_resolve(problem, a, "input"), _resolve(problem, b, "output")) for a, b in mask]
    seen, out = set(), []
    for i, o in pairs:
        if (i, o) not in seen:
            seen.add((i, o))
            out.append(((i, o - n), i, o))
    return out


def _ad_blocks(problem, pairs):
    args = problem.fresh_args()
    problem.run(args)          # the primal state a recorded launch's backward would see
    blocks = {key: np.zeros((args[o].size, args[i].size)) for key, i, o in pairs}
    for o in sorted({o for _, _, o in pairs}):
        for row in range(args[o].size):
            adjs = [np.zeros_like(a) if k in problem.in_params or k in problem.out_params else None
                    for k, a in enumerate(args)]
            adjs[o].reshape(-1)[row] = 1.0
            problem.adjoint(args, adjs)
            for key, i, oo in pairs:
                if oo == o:
                    blocks[key][row] = adjs[i].reshape(-1)
    return blocks


def _jvp_blocks(problem, pairs):
    """The blocks ``CHUNK`` columns at a time: one vector JVP launch along ``k`` one-hot
    input tangents gives ``k`` columns of every block of that input."""
    n, args0 = problem.n_inputs, problem.args
    blocks = {key: np.zeros((args0[o].size, args0[i].size)) for key, i, o in pairs}
    for i in sorted({i for _, i, _ in pairs}):
        size = args0[i].size
        for start in range(0, size, CHUNK):
            k = min(CHUNK, size - start)
            seeds = np.zeros((k, size), dtype=args0[i].dtype)
            seeds[np.arange(k), start + np.arange(k)] = 1.0
            dev = [_on_device(a, problem.device) for a in problem.fresh_args()]
            seeds = _on_device(seeds.reshape((k,) + args0[i].shape), problem.device)
            from .vector_mode import jvp_launch     # (the transformer: gast, when first used)
            out = jvp_launch(problem.kernel, problem.dims, dev[:n], dev[n:], device=problem.device,
                             tangents={problem.name(i): seeds})
            for key, ii, o in pairs:
                if ii == i:
                    blocks[key][:, start:start + k] = _host(out[problem.name(o)]).reshape(k, -1).T
    return blocks


def _fd_blocks(problem, pairs, eps):
    blocks = {key: np.zeros((problem.args[o].size, problem.args[i].size)) for key, i, o in pairs}
    for i in sorted({i for _, i, _ in pairs}):
        for col in range(problem.args[i].size):
            sides = []
            for step in (eps, -eps):
                args = problem.fresh_args()
                args[i].reshape(-1)[col] += step
                problem.run(args)
                sides.append(args)
            for key, ii, o in pairs:
                if ii == i:
                    diff = sides[0][o].reshape(-1).astype(np.float64) - sides[1][o].reshape(-1)
                    blocks[key][:, col] = diff / (2.0 * eps)
    return blocks


def jacobian(kernel, dim, inputs, outputs, input_output_mask=None):
    """``{(input index, output index): d output / d input}``, ``CHUNK`` columns per
    vector-mode JVP launch (the kernel's backward, a row per launch, where it has no JVP).

    ``input_output_mask``: pairs ``(input, output)``, each a parameter name or an
    index into ``inputs``/``outputs`` (mixed freely); default: every float array pair."""
    problem = _problem(kernel, dim, inputs, outputs)
    pairs = _pairs(problem, input_output_mask)
    if not isinstance(kernel, Kernel):         # (a generated module's kernel)
        return _ad_blocks(problem, pairs)
    try:
        return _jvp_blocks(problem, pairs)
    except (AdjointError, LaunchError) as exc:
        if "JVP" not in str(exc) and "func_grad" not in str(exc):
            raise
        return _ad_blocks(problem, pairs)       # (a func with only @ad.func_grad: no JVP)


def jacobian_fd(kernel, dim, inputs, outputs, input_output_mask=None, eps=1e-6):
    """The same blocks as ``jacobian``, by central finite differences of the forward."""
    problem = _problem(kernel, dim, inputs, outputs)
    return _fd_blocks(problem, _pairs(problem, input_output_mask), eps)


@dataclass
class Mismatch:
    """One Jacobian entry where AD and FD disagree."""
    input: str
    output: str
    out_index: tuple
    in_index: tuple
    ad: float
    fd: float
    excess: float         # |ad - fd| - (atol + rtol * |fd|), > 0 (inf for NaN)

    def row(self):
        err = abs(self.ad - self.fd)
        def at(index):
            return "[" + ", ".join(str(int(i)) for i in index) + "]"
        return (f"  {self.output}{at(self.out_index)} / {self.input}{at(self.in_index)}: "
                f"AD {self.ad:.10g}  FD {self.fd:.10g}  |error| {err:.3g}")


def _compare(problem, pairs, ad, fd, atol, rtol):
    bad = []
    for key, i, o in pairs:
        a, f = ad[key], fd[key]
        excess = np.abs(a - f) - (atol + rtol * np.abs(f))
        excess = np.where(np.isfinite(a) & np.isfinite(f), excess, np.inf)
        for r, c in zip(*np.nonzero(excess > 0)):
            bad.append(Mismatch(problem.name(i), problem.name(o),
                                np.unravel_index(r, problem.args[o].shape),
                                np.unravel_index(c, problem.args[i].shape),
                                float(a[r, c]), float(f[r, c]), float(excess[r, c])))
    bad.sort(key=lambda m: -m.excess)
    return bad


def _report(title, problem, pairs, bad, atol, rtol, worst=10):
    total = sum(problem.args[o].size * problem.args[i].size for _, i, o in pairs)
    lines = [f"{title}: {len(bad)} of {total} Jacobian entries differ from finite differences "
             f"(atol={atol:g}, rtol={rtol:g}); worst {min(worst, len(bad))}:",
             "  output[index] / input[index]: AD, FD, error"]
    lines += [m.row() for m in bad[:worst]] + [_by_block(problem, pairs, bad)]
    return "\n".join(lines)


def _by_block(problem, pairs, bad):
    """Which partials are wrong: ``d out/d y: 4 of 16 entries wrong; d out/d x agrees``."""
    sizes = {(problem.name(o), problem.name(i)): problem.args[o].size * problem.args[i].size
             for _, i, o in pairs}
    wrong = {}
    for m in bad:
        wrong[(m.output, m.input)] = wrong.get((m.output, m.input), 0) + 1
    parts = [f"d {o}/d {i}: {n} of {sizes[(o, i)]} entries wrong" for (o, i), n in wrong.items()]
    parts += [f"d {o}/d {i} agrees" for (o, i) in sizes if (o, i) not in wrong]
    return "  by partial: " + "; ".join(parts)


def _check(problem, mask, eps, atol, rtol, title):
    pairs = _pairs(problem, mask)
    ad = _ad_blocks(problem, pairs)
    fd = _fd_blocks(problem, pairs, eps)
    bad = _compare(problem, pairs, ad, fd, atol, rtol)
    return None if not bad else _report(title, problem, pairs, bad, atol, rtol)


def _fail(report, raise_exception):
    if raise_exception:
        raise GradcheckError(report)
    print(report)
    return False


def gradcheck(kernel, dim, inputs, outputs, eps=1e-6, atol=1e-5, rtol=1e-3,
              input_output_mask=None, raise_exception=True):
    """Whether every Jacobian entry from the backward matches central finite differences
    (``|AD - FD| <= atol + rtol * |FD|``). On a mismatch, report the worst entries:
    raise ``GradcheckError`` or, with ``raise_exception=False``, print and return False."""
    problem = _problem(kernel, dim, inputs, outputs)
    report = _check(problem, input_output_mask, eps, atol, rtol,
                    f"gradcheck of kernel '{problem.spec.name}'")
    return True if report is None else _fail(report, raise_exception)


def gradcheck_tape(tape, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """Check every recorded launch on ``tape`` against finite differences, in order,
    at the values it read (kept copies included); name the first that disagrees.

    A launch's inputs are the float arrays it reads, its outputs those it writes.
    Copies are exact by construction and ``record_func`` steps are opaque: both skipped."""
    for step in tape.steps:
        if not isinstance(step, LaunchStep) or step.kernel.backward is None:
            continue
        spec, n = step.kernel, len(step.values)
        args = [_host(v) for v in step.values]
        reads = [k for k in range(n) if spec.params[k].name in spec.reads]
        writes = [k for k in range(n) if spec.params[k].name in spec.writes]
        # Every argument goes in ``inputs`` (the split only matters for the launch call).
        problem = Problem(spec, step.dims, args, n, _differentiable(spec, args, reads),
                          _differentiable(spec, args, writes), _device(step.args))
        report = _check(problem, None, eps, atol, rtol, f"{step.label} disagrees")
        if report is not None:
            return _fail(report, raise_exception)
    return True


def hvp(kernel, dim, inputs, outputs, v, w=None, mode="fwd-rev", k=None):
    """Hessian-vector products of a kernel: for each input, ``H_w v`` restricted to it,
    where ``H_w`` is the Hessian of ``sum(w * outputs)`` over all float array inputs.

    ``v``: one direction per input (an array of its shape, or None for zero; ignored
    for scalars and integer arrays); ``w``: one weight array per output (default: ones
    for every float array output). Returns one array per input (None where it has
    no gradient). Runs on private copies; records nothing.

    ``mode="fwd-rev"`` (forward over reverse, the default): the kernel's backward,
    printed as a kernel of its own (``adjoint.printed.vjp_kernel``), runs in
    forward mode along ``v`` (its primal state from the kernel's JVP, as a recorded
    launch's backward would see it), seeded with ``w``: the tangents of its input
    adjoints are ``H_w v``. One JVP and one differentiated backward, no stored tape of
    the JVP. ``mode="rev-fwd"`` (reverse over forward): the kernel's JVP, printed as a
    kernel (``jvp_kernel``), is differentiated by its backward with the seed ``w`` on
    the output tangents.

    ``k`` (vector mode, ``fwd-rev`` only): ``k`` directions at once, each entry of ``v``
    of shape ``(k, *input's shape)``, row ``j`` direction ``j``; returns ``(k, *shape)``
    arrays, row ``j`` the product along direction ``j`` (bit for bit), from two vector
    JVP launches (adjoint/derivatives/vector_mode.py): the primal state and the backward's replay are
    computed once for all ``k``."""
    if mode not in ("fwd-rev", "rev-fwd"):
        raise ValueError(f"hvp: mode must be 'fwd-rev' or 'rev-fwd', got {mode!r}")
    if k is not None and (mode != "fwd-rev" or type(k) is not int or k < 1):
        raise ValueError(f"hvp: k is a number of directions >= 1 with mode='fwd-rev', got "
                         f"k={k!r} with mode={mode!r}")
    from .printed import jvp_kernel, vjp_kernel
    base = _problem(kernel, dim, inputs, outputs)
    n = base.n_inputs
    v = [None] * n if v is None else list(v)
    w = [None] * (len(base.args) - n) if w is None else list(w)
    if len(v) != n or len(w) != len(base.args) - n:
        raise ValueError(f"kernel '{base.spec.name}': v needs one entry per input ({n}) and w "
                         f"one per output ({len(base.args) - n}), got {len(v)} and {len(w)}")
    floats = [m for m, p in enumerate(base.spec.params) if p.has_adjoint]
    dots, seeds = [], []
    for m in floats:
        a = base.args[m]
        given = v[m] if m < n else None
        shape = a.shape if k is None else (k,) + a.shape
        if given is not None and k is not None and tuple(np.shape(_host(given))) != shape:
            raise ValueError(f"hvp of kernel '{base.spec.name}': the directions for "
                             f"'{base.name(m)}' must have shape {shape} (k={k} directions of "
                             f"its shape {a.shape}), got {tuple(np.shape(_host(given)))}")
        dots.append(np.zeros(shape, a.dtype) if given is None else
                    np.array(_host(given), dtype=a.dtype).reshape(shape))
        weight = w[m - n] if m >= n else None
        seeds.append(None if m < n else np.ones_like(a) if weight is None else
                     np.array(_host(weight), dtype=a.dtype).reshape(a.shape))
    adjs = [np.zeros_like(base.args[m]) if s is None else s.copy()
            for m, s in zip(floats, seeds)]
    if mode == "fwd-rev":
        return _forward_over_reverse(vjp_kernel(kernel), base, floats, dots, adjs, k)
    args = base.fresh_args() + dots
    problem = Problem(jvp_kernel(kernel), base.dims, args, len(args), [], [], base.device)
    problem.run(args)          # the primal state a recorded launch's backward would see
    adjs = [np.zeros_like(a) if m in floats else None for m, a in enumerate(base.args)] + adjs
    problem.adjoint(args, adjs)
    return [adjs[m] if m in floats else None for m in range(n)]


def _forward_over_reverse(backward, base, floats, dots, adjs, k=None):
    """``hvp``'s forward over reverse: the JVP of the printed ``backward`` kernel (along
    ``k`` directions at once with ``k``: vector mode)."""
    if k is not None:
        from .vector_mode import jvp_launch         # (the transformer: gast, when first used)
    run = partial(launch, record_tape=False) if k is None else jvp_launch
    dev = [_on_device(a, base.device) for a in base.fresh_args()]
    names = [base.spec.params[k].name for k in floats]
    # the kernel's JVP: the state after the forward, and its tangents along v
    tangents = run(base.kernel, base.dims, inputs=dev, device=base.device,
                   tangents={p: _on_device(d, base.device) for p, d in zip(names, dots)})
    adj = [_on_device(a, base.device) for a in adjs]
    given = dict(tangents)
    given.update({f"adj_{p}": _on_device(np.zeros_like(d), base.device)
                  for p, d in zip(names, dots)})
    out = run(backward, base.dims, inputs=dev + adj, device=base.device, tangents=given)
    by_param = dict(zip(floats, names))
    return [_host(out[f"adj_{by_param[k]}"]) if k in by_param else None
            for k in range(base.n_inputs)]
