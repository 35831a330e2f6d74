"""PyTorch interop: a kernel launch as a ``torch.autograd.Function``.

    import adjoint.torch                       # needs the optional extra adjoint[torch]
    (f,) = adjoint.torch.apply(springs, dim=n, inputs=[px, py, i, j, rest, 2.0],
                               outputs=[torch.zeros(m, dtype=torch.float64)])

* CPU tensors are shared with the kernel, never copied: ``from_torch`` /
  ``to_torch`` are numpy views (a non-contiguous tensor is made contiguous first).
* ``outputs`` give each output's initial contents (a tensor, left unchanged) or
  its shape (zeros of the kernel's dtype); ``apply`` returns new output tensors,
  one per output, as a tuple.
* Floats and ints (and adjoint/numpy arrays) pass through with no gradient.
* The backward works on a copy of PyTorch's ``grad_output`` (a store clears the
  output adjoint it consumes), so ``grad_output`` is never modified.
* Double backward (``create_graph=True``) raises: the generated backward is not
  itself differentiable.
"""
import numbers

import numpy as np
import torch

from .errors import AdjointError
from .runtime.array import Array
from .runtime.launch import launch

__all__ = ["apply", "from_torch", "to_torch", "KernelFunction"]


def _check_cpu(t, what):
    if t.device.type != "cpu":
        raise AdjointError(f"{what}: adjoint runs on the CPU; got a tensor on {t.device}")


def to_numpy(t):
    """A numpy view of CPU tensor ``t`` (no copy unless ``t`` is not contiguous)."""
    _check_cpu(t, "to_numpy")
    return t.detach().contiguous().numpy()


def from_torch(t, requires_grad=False):
    """An ``ad.Array`` sharing the memory of CPU tensor ``t``."""
    return Array(to_numpy(t), requires_grad=requires_grad, device="cpu", _owned=True)


def to_torch(a):
    """A tensor sharing the memory of ``ad.Array`` (or numpy array) ``a``."""
    return torch.from_numpy(a.numpy() if isinstance(a, Array) else a)


def _output_tensor(param, init, kernel_name):
    if isinstance(init, torch.Tensor):
        _check_cpu(init, f"kernel '{kernel_name}', output '{param.name}'")
        return init
    if isinstance(init, numbers.Integral) or isinstance(init, tuple):
        dtype = getattr(torch, np.dtype(param.dtype).name)
        return torch.zeros(init, dtype=dtype)
    raise TypeError(f"kernel '{kernel_name}', output '{param.name}': give a tensor (its initial "
                    f"contents) or a shape, not {type(init).__name__}")


def _argument(param, value, kernel_name):
    """What the kernel receives for ``value``: a numpy view, or the scalar itself."""
    if isinstance(value, torch.Tensor):
        where = f"kernel '{kernel_name}', parameter '{param.name}'"
        _check_cpu(value, where)
        if not param.is_array:
            if value.requires_grad:
                raise AdjointError(f"{where} is a scalar and gets no gradient; pass a float "
                                   "(or a detached tensor) instead of a tensor that requires grad")
            return value.item()
        return to_numpy(value)
    return value


class KernelFunction(torch.autograd.Function):
    """``forward(ctx, kernel, dim, n_inputs, *inputs_then_output_inits)``."""

    @staticmethod
    def forward(ctx, kernel, dim, n_inputs, *args):
        spec = kernel.spec
        params = spec.params
        inputs = [_argument(p, a, spec.name) for p, a in zip(params, args[:n_inputs])]
        outs = [init.detach().clone(memory_format=torch.contiguous_format)
                for init in args[n_inputs:]]
        launch(kernel, dim, inputs=inputs, outputs=[o.numpy() for o in outs], device="cpu",
               record_tape=False)
        ctx.kernel, ctx.dim, ctx.n_inputs = kernel, dim, n_inputs
        ctx.constants = [None if isinstance(a, torch.Tensor) else a for a in args[:n_inputs]]
        ctx.save_for_backward(*[a if isinstance(a, torch.Tensor) else None
                                for a in args[:n_inputs]], *outs)
        ctx.mark_non_differentiable(*[o for p, o in zip(params[n_inputs:], outs)
                                      if not p.has_adjoint])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        spec = ctx.kernel.spec
        if torch.is_grad_enabled():
            raise RuntimeError(f"adjoint.torch: double backward (create_graph=True) through "
                               f"kernel '{spec.name}' is not supported: its generated backward "
                               "is not itself differentiable")
        n = ctx.n_inputs
        saved = ctx.saved_tensors
        params = spec.params
        inputs = [_argument(p, t, spec.name) if t is not None else c
                  for p, t, c in zip(params, saved[:n], ctx.constants)]
        outputs = [to_numpy(o) for o in saved[n:]]
        needs = ctx.needs_input_grad[3:]
        adj_in = [np.zeros_like(v) if p.has_adjoint and needs[k] else None
                  for k, (p, v) in enumerate(zip(params, inputs))]
        adj_out = [None if not p.has_adjoint else
                   np.zeros_like(v) if g is None else g.detach().cpu().numpy().astype(v.dtype, copy=True)
                   for p, v, g in zip(params[n:], outputs, grad_outputs)]
        launch(ctx.kernel, ctx.dim, inputs=inputs, outputs=outputs, device="cpu", adjoint=True,
               adj_inputs=adj_in, adj_outputs=adj_out)
        grads_in = [None if a is None else torch.from_numpy(a) for a in adj_in]
        grads_init = [None if a is None or not needs[n + j] else torch.from_numpy(a)
                      for j, a in enumerate(adj_out)]
        return (None, None, None, *grads_in, *grads_init)


def apply(kernel, dim, inputs, outputs):
    """Launch ``kernel`` on tensors inside PyTorch's autograd; return the output tensors.

    ``inputs``: tensors (float tensors get gradients when they require grad),
    floats and ints. ``outputs``: per output, a tensor with its initial contents or
    a shape. The gradient of an output's initial contents is passed back too
    (identity where the kernel accumulates, zero where it stores)."""
    spec = kernel.spec
    n = len(inputs)
    if n + len(outputs) != len(spec.params):
        names = ", ".join(p.name for p in spec.params)
        raise AdjointError(f"kernel '{spec.name}' takes {len(spec.params)} arguments ({names}), "
                           f"got {n} inputs + {len(outputs)} outputs")
    inits = [_output_tensor(p, o, spec.name) for p, o in zip(spec.params[n:], outputs)]
    return KernelFunction.apply(kernel, dim, n, *inputs, *inits)
