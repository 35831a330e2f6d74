"""PyTorch interop: a kernel launch as a ``torch.autograd.Function``.

    import adjoint.torch                       # needs the optional extra adjoint[torch]
    (f,) = adjoint.torch.apply(springs, dim=n, inputs=[px, py, i, j, rest, 2.0],
                               outputs=[torch.zeros(m, dtype=torch.float64)])

* CPU tensors are shared with the kernel, never copied: ``from_torch`` /
  ``to_torch`` are numpy views (a non-contiguous tensor is made contiguous first).
* CUDA tensors run on adjoint's CUDA backend, shared the same way: each is wrapped
  with ``ad.Array(t, device="cuda")`` through its ``__cuda_array_interface__`` (no
  copy), outputs and gradients are tensors PyTorch allocated on the tensors' device,
  which the kernels write in place. The array tensors of one call are all on the CPU
  or all on CUDA (the GPU numba uses). Before outputs or gradients are handed to
  PyTorch, which reads GPU memory without adjoint, a fault a checked kernel found is
  raised (runtime/pending.py): this waits for the GPU when a launch had checks.
* ``outputs`` give each output's initial contents (a tensor, left unchanged) or
  its shape (zeros of the kernel's dtype); ``apply`` returns new output tensors,
  one per output, as a tuple.
* Floats and ints (and adjoint/numpy arrays) pass through with no gradient.
* A struct argument (``@ad.struct``) is passed as its fields, flattened as ``launch``
  flattens it (runtime/structs.py ``flatten_args``): a tensor held in a field is an
  input of its own and gets its gradient; the kernel is then launched through its
  compiled ``KernelSpec``, whose parameters are those fields.
* The backward works on a copy of PyTorch's ``grad_output`` (a store clears the
  output adjoint it consumes), so ``grad_output`` is never modified.
* Double backward (``create_graph=True``) raises: the generated backward is not
  itself differentiable.
"""
import numbers

import numpy as np
import torch

from ..errors import AdjointError
from ..runtime import pending, structs
from ..runtime.array import Array
from ..runtime.launch import launch

__all__ = ["apply", "from_torch", "to_torch", "KernelFunction"]


def _check_cpu(t, what):
    if t.device.type != "cpu":
        raise AdjointError(f"{what}: adjoint runs on the CPU; got a tensor on {t.device}")


def to_numpy(t):
    """A numpy view of CPU tensor ``t`` (no copy unless ``t`` is not contiguous)."""
    _check_cpu(t, "to_numpy")
    return t.detach().contiguous().numpy()


def from_torch(t, requires_grad=False):
    """An ``ad.Array`` sharing the memory of tensor ``t``: on "cpu" for a CPU tensor, on
    "cuda" for a CUDA tensor (no copy unless ``t`` is not contiguous)."""
    if _on_cuda(t):
        arr = _cuda_array(t)
        arr.requires_grad = requires_grad
        return arr
    return Array(to_numpy(t), requires_grad=requires_grad, device="cpu", _owned=True)


def to_torch(a):
    """A tensor sharing the memory of ``ad.Array`` (or numpy array) ``a``: a CPU tensor,
    or for an array on "cuda" a CUDA tensor over its device memory (through
    ``__cuda_array_interface__``; the tensor keeps the memory alive). The latter first
    raises a fault a checked CUDA launch found (runtime/pending.py): PyTorch reads the
    memory without adjoint."""
    if isinstance(a, Array) and a.device == "cuda":
        pending.check("adjoint.torch.to_torch")
        return torch.as_tensor(a.data, device="cuda")
    return torch.from_numpy(a.numpy() if isinstance(a, Array) else a)


def _on_cuda(t):
    """Whether tensor ``t`` is on a CUDA device (a hook: the tests stand CPU tensors in
    for CUDA ones under numba's simulator, whose device memory is host memory)."""
    return t.device.type == "cuda"


def _cuda_memory(t):
    """What ``ad.Array(..., device="cuda")`` wraps for the detached, contiguous CUDA
    tensor ``t``: the tensor itself, through its ``__cuda_array_interface__`` (a hook,
    like ``_on_cuda``)."""
    return t


def _cuda_array(t):
    """An ``ad.Array`` on "cuda" over the memory of tensor ``t`` (no copy unless ``t`` is
    not contiguous); it keeps the tensor alive. (Detached: PyTorch gives no
    ``__cuda_array_interface__`` for a tensor that requires grad.)"""
    return Array(_cuda_memory(t.detach().contiguous()), device="cuda")


def _spec(kernel, values=(), device=None):
    """The ``KernelSpec`` of ``kernel`` for ``device`` (by default, "cuda" when a tensor
    among ``values`` that can be an array (not 0-d) is a CUDA tensor)."""
    if device is None:
        device = "cuda" if any(isinstance(v, torch.Tensor) and v.dim() > 0 and _on_cuda(v)
                               for v in values) else "cpu"
    return kernel.spec_for(device) if hasattr(kernel, "spec_for") else kernel.spec


def _device(spec, values):
    """``"cuda"`` when the array arguments among ``values`` (in parameter order) are
    CUDA tensors, ``"cpu"`` when they are CPU tensors or there are none; a mix is refused."""
    where = {}
    for p, v in zip(spec.params, values):
        if isinstance(v, torch.Tensor) and p.is_array:
            where.setdefault("cuda" if _on_cuda(v) else "cpu", p.name)
    if len(where) > 1:
        raise AdjointError(f"kernel '{spec.name}': parameter '{where['cpu']}' is a CPU tensor "
                           f"and '{where['cuda']}' a CUDA tensor; put the tensors of one call "
                           "on one device")
    if "cuda" in where:
        from ..runtime import backend_cuda
        if not backend_cuda.available():
            raise AdjointError(f"kernel '{spec.name}': CUDA tensors run on adjoint's CUDA "
                               "backend, which needs numba-cuda and a working CUDA driver "
                               "(pip install adjoint[cuda]); none is available here")
        return "cuda"
    return "cpu"


def _output_tensor(param, init, kernel_name, like=None):
    """The initial contents of output ``param``: the tensor given, or zeros of shape
    ``init`` on the device of tensor ``like`` (the CPU when None)."""
    if isinstance(init, torch.Tensor):
        return init
    if isinstance(init, numbers.Integral) or isinstance(init, tuple):
        dtype = getattr(torch, np.dtype(param.dtype).name)
        return torch.zeros(init, dtype=dtype,
                           device=like.device if like is not None else None)
    raise TypeError(f"kernel '{kernel_name}', output '{param.name}': give a tensor (its initial "
                    f"contents) or a shape, not {type(init).__name__}")


def _argument(param, value, kernel_name, device="cpu"):
    """What the kernel receives for ``value``: a numpy view (cpu), an ``ad.Array`` over
    the tensor's memory (cuda), or the scalar itself."""
    if isinstance(value, torch.Tensor):
        where = f"kernel '{kernel_name}', parameter '{param.name}'"
        if not param.is_array:
            if value.requires_grad:
                raise AdjointError(f"{where} is a scalar and gets no gradient; pass a float "
                                   "(or a detached tensor) instead of a tensor that requires grad")
            return value.item()
        if device == "cuda":
            return _cuda_array(value)
        _check_cpu(value, where)
        return to_numpy(value)
    return value


def _hand_over(where):
    """Before PyTorch uses what adjoint's CUDA kernels wrote: the fault of a checked launch
    is raised (runtime/pending.py; ``where`` names this point), and when PyTorch works on
    a stream of its own, which does not wait for the default stream adjoint launches on,
    the host waits for the GPU. (Inputs need nothing: wrapping a tensor waits for the
    stream it names, numba's ``__cuda_array_interface__`` rule.)"""
    pending.check(where)
    if torch.cuda.is_available() and torch.cuda.current_stream() != torch.cuda.default_stream():
        from numba import cuda
        cuda.synchronize()


def _copy_of(g, like):
    """A new contiguous tensor shaped and typed like ``like`` holding ``g`` (PyTorch's
    ``grad_output``, never written) or zeros (``g`` None), on ``like``'s device."""
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    return out.zero_() if g is None else out.copy_(g.detach())


class KernelFunction(torch.autograd.Function):
    """``forward(ctx, kernel, dim, n_inputs, *inputs_then_output_inits)``."""

    @staticmethod
    def forward(ctx, kernel, dim, n_inputs, *args):
        spec = _spec(kernel, args)
        params = spec.params
        device = _device(spec, args)
        inputs = [_argument(p, a, spec.name, device) for p, a in zip(params, args[:n_inputs])]
        outs = [init.detach().clone(memory_format=torch.contiguous_format)
                for init in args[n_inputs:]]
        if device == "cuda":
            launch(spec, dim, inputs=inputs, outputs=[_cuda_array(o) for o in outs],
                   device="cuda", record_tape=False)
            _hand_over(f"adjoint.torch (kernel '{spec.name}', before PyTorch reads its outputs)")
        else:
            launch(spec, dim, inputs=inputs, outputs=[o.numpy() for o in outs], device="cpu",
                   record_tape=False)
        ctx.kernel, ctx.dim, ctx.n_inputs, ctx.device = kernel, dim, n_inputs, device
        ctx.constants = [None if isinstance(a, torch.Tensor) else a for a in args[:n_inputs]]
        ctx.save_for_backward(*[a if isinstance(a, torch.Tensor) else None
                                for a in args[:n_inputs]], *outs)
        ctx.mark_non_differentiable(*[o for p, o in zip(params[n_inputs:], outs)
                                      if not p.has_adjoint])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        device = ctx.device
        spec = _spec(ctx.kernel, device=device)
        if torch.is_grad_enabled():
            raise RuntimeError(f"adjoint.torch: double backward (create_graph=True) through "
                               f"kernel '{spec.name}' is not supported: its generated backward "
                               "is not itself differentiable")
        n = ctx.n_inputs
        saved = ctx.saved_tensors
        params = spec.params
        inputs = [_argument(p, t, spec.name, device) if t is not None else c
                  for p, t, c in zip(params, saved[:n], ctx.constants)]
        needs = ctx.needs_input_grad[3:]
        if device == "cuda":
            # gradients PyTorch allocates and the backward kernel writes in place
            outputs = [_cuda_array(o) for o in saved[n:]]
            adj_in = [_copy_of(None, t) if p.has_adjoint and needs[k] else None
                      for k, (p, t) in enumerate(zip(params, saved[:n]))]
            adj_out = [_copy_of(g, o) if p.has_adjoint else None
                       for p, o, g in zip(params[n:], saved[n:], grad_outputs)]
            launch(spec, ctx.dim, inputs=inputs, outputs=outputs, device="cuda",
                   adjoint=True, adj_inputs=[None if a is None else _cuda_array(a) for a in adj_in],
                   adj_outputs=[None if a is None else _cuda_array(a) for a in adj_out])
            _hand_over(f"adjoint.torch (kernel '{spec.name}', before PyTorch reads its "
                       "gradients)")
            grads_in, grads_init = adj_in, adj_out
        else:
            outputs = [to_numpy(o) for o in saved[n:]]
            adj_in = [np.zeros_like(v) if p.has_adjoint and needs[k] else None
                      for k, (p, v) in enumerate(zip(params, inputs))]
            adj_out = [None if not p.has_adjoint else
                       np.zeros_like(v) if g is None else
                       g.detach().cpu().numpy().astype(v.dtype, copy=True)
                       for p, v, g in zip(params[n:], outputs, grad_outputs)]
            launch(spec, ctx.dim, inputs=inputs, outputs=outputs, device="cpu",
                   adjoint=True, adj_inputs=adj_in, adj_outputs=adj_out)
            grads_in = [None if a is None else torch.from_numpy(a) for a in adj_in]
            grads_init = [None if a is None else torch.from_numpy(a) for a in adj_out]
        grads_init = [None if a is None or not needs[n + j] else a
                      for j, a in enumerate(grads_init)]
        return (None, None, None, *grads_in, *grads_init)


def apply(kernel, dim, inputs, outputs):
    """Launch ``kernel`` on tensors inside PyTorch's autograd; return the output tensors.

    ``inputs``: tensors (float tensors get gradients when they require grad),
    floats and ints. ``outputs``: per output, a tensor with its initial contents or
    a shape. The gradient of an output's initial contents is passed back too
    (identity where the kernel accumulates, zero where it stores). The array tensors
    are all CPU tensors (the kernel runs on the CPU) or all CUDA tensors (on the GPU;
    outputs given as shapes are made there). A struct argument is one argument, passed
    on as its fields (``flatten_args``): the tensors it holds get gradients."""
    given = f"{len(inputs)} inputs + {len(outputs)} outputs"
    try:
        inputs, outputs, _, _ = structs.flatten_args(kernel, list(inputs), list(outputs))
    except TypeError as exc:
        raise AdjointError(f"adjoint.torch.apply: {exc}") from None
    spec = _spec(kernel, (*inputs, *outputs))
    n = len(inputs)
    if n + len(outputs) != len(spec.params):
        names = structs.parameter_names(kernel) or [p.name for p in spec.params]
        raise AdjointError(f"kernel '{spec.name}' takes {len(names)} arguments "
                           f"({', '.join(names)}), got {given}")
    device = _device(spec, [*inputs, *outputs])
    like = next((a for p, a in zip(spec.params, (*inputs, *outputs))
                 if isinstance(a, torch.Tensor) and p.is_array), None)
    inits = [_output_tensor(p, o, spec.name, like if device == "cuda" else None)
             for p, o in zip(spec.params[n:], outputs)]
    return KernelFunction.apply(kernel, dim, n, *inputs, *inits)
