"""Optimizers: ``ad.optim.SGD`` and ``ad.optim.Adam`` update ``ad.Array`` parameters in
place with adjoint kernels, so they run on every backend (python, numba, CUDA).

``opt.step()`` reads each parameter's ``.grad``; ``opt.step(grads)`` takes one gradient
per parameter (an ``ad.Array`` of the parameter's shape, or ``None`` to leave that
parameter alone), as ``warp.optim`` does. Updates are launched outside any tape
(``record_tape=False``); a tape that read a parameter keeps a copy of the values it
read, as for any overwrite. A parameter of any shape is updated through a flat view.
Adam keeps its two moments per parameter in ping-pong buffers (no allocation per
step); its update is PyTorch's (bias-corrected, ``eps`` added to the root).
"""
import math

import adjoint as ad

from ..errors import AdjointError
from ..runtime import buffers
from ..runtime.array import Array


@ad.kernel(enable_backward=False)
def sgd_step(g: ad.array(dtype=float), lr: float, p: ad.array(dtype=float)):
    """``p -= lr * g``."""
    i = ad.tid()
    p[i] += -lr * g[i]


@ad.kernel(enable_backward=False)
def sgd_momentum_step(g: ad.array(dtype=float), b: ad.array(dtype=float), lr: float,
                      momentum: float, p: ad.array(dtype=float), b_new: ad.array(dtype=float)):
    """``b = momentum * b + g; p -= lr * b``."""
    i = ad.tid()
    bi = momentum * b[i] + g[i]
    b_new[i] = bi
    p[i] += -lr * bi


@ad.kernel(enable_backward=False)
def adam_step(g: ad.array(dtype=float), m: ad.array(dtype=float), v: ad.array(dtype=float),
              lr: float, beta1: float, beta2: float, eps: float, correction1: float,
              correction2: float, p: ad.array(dtype=float), m_new: ad.array(dtype=float),
              v_new: ad.array(dtype=float)):
    """The moments' new values into ``m_new``, ``v_new``; ``p -= lr * m^ / (sqrt(v^) + eps)``."""
    i = ad.tid()
    mi = beta1 * m[i] + (1.0 - beta1) * g[i]
    vi = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i]
    m_new[i] = mi
    v_new[i] = vi
    p[i] += -lr * (mi / correction1) / (math.sqrt(vi / correction2) + eps)


@ad.kernel(enable_backward=False)
def sgd_step_f32(g: ad.array(dtype=ad.float32), lr: float, p: ad.array(dtype=ad.float32)):
    """``sgd_step`` for float32 parameters."""
    i = ad.tid()
    p[i] += -lr * g[i]


@ad.kernel(enable_backward=False)
def sgd_momentum_step_f32(g: ad.array(dtype=ad.float32), b: ad.array(dtype=ad.float32),
                          lr: float, momentum: float, p: ad.array(dtype=ad.float32),
                          b_new: ad.array(dtype=ad.float32)):
    """``sgd_momentum_step`` for float32 parameters."""
    i = ad.tid()
    bi = momentum * b[i] + g[i]
    b_new[i] = bi
    p[i] += -lr * bi


@ad.kernel(enable_backward=False)
def adam_step_f32(g: ad.array(dtype=ad.float32), m: ad.array(dtype=ad.float32),
                  v: ad.array(dtype=ad.float32), lr: float, beta1: float, beta2: float,
                  eps: float, correction1: float, correction2: float,
                  p: ad.array(dtype=ad.float32), m_new: ad.array(dtype=ad.float32),
                  v_new: ad.array(dtype=ad.float32)):
    """``adam_step`` for float32 parameters."""
    i = ad.tid()
    mi = beta1 * m[i] + (1.0 - beta1) * g[i]
    vi = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i]
    m_new[i] = mi
    v_new[i] = vi
    p[i] += -lr * (mi / correction1) / (math.sqrt(vi / correction2) + eps)


KERNELS = {"float64": (sgd_step, sgd_momentum_step, adam_step),
           "float32": (sgd_step_f32, sgd_momentum_step_f32, adam_step_f32)}


def _flat(a):
    """An ``Array`` over the same memory as ``a``, flattened (no copy)."""
    return Array(buffers.flat(a.data), device=a.device, _owned=True)


class Optimizer:
    """Parameters, their flat views, and the gradients a step uses."""

    def __init__(self, params, lr):
        self.params = list(params)
        for k, p in enumerate(self.params):
            if not isinstance(p, Array) or p.dtype.kind != "f":
                raise AdjointError(f"{type(self).__name__}: parameter {k} must be a float "
                                   f"ad.Array, not {type(p).__name__}")
        self.lr = float(lr)
        dtypes = {str(p.dtype) for p in self.params}
        if not dtypes <= set(KERNELS):
            raise AdjointError(f"{type(self).__name__}: parameters must be float32 or float64, "
                               f"not {sorted(dtypes)}")
        self._views = [_flat(p) for p in self.params]
        self.steps = 0

    def _grads(self, grads):
        """[(index, flat parameter, flat gradient)] of the parameters this step updates."""
        if grads is None:
            grads = [p.grad for p in self.params]
        grads = list(grads)
        if len(grads) != len(self.params):
            raise AdjointError(f"{type(self).__name__}.step: {len(grads)} gradients for "
                               f"{len(self.params)} parameters")
        out = []
        for k, (p, g) in enumerate(zip(self.params, grads)):
            if g is None:
                continue
            if not isinstance(g, Array) or g.shape != p.shape or g.dtype != p.dtype \
                    or g.device != p.device:
                raise AdjointError(f"{type(self).__name__}.step: the gradient of parameter {k} "
                                   f"must be an ad.Array of shape {p.shape}, dtype {p.dtype} on "
                                   f"{p.device!r}, not {g!r:.80}")
            out.append((k, self._views[k], _flat(g)))
        return out

    def zero_grad(self):
        """Zero every parameter's ``.grad``."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()


class SGD(Optimizer):
    """``p -= lr * g`` (with ``momentum``: ``b = momentum * b + g; p -= lr * b``)."""

    def __init__(self, params, lr=1e-3, momentum=0.0):
        super().__init__(params, lr)
        self.momentum = float(momentum)
        self._b = [[ad.zeros_like(v, requires_grad=False), ad.zeros_like(v, requires_grad=False)]
                   for v in self._views] if self.momentum else None

    def step(self, grads=None):
        for k, p, g in self._grads(grads):
            plain, momentum, _ = KERNELS[str(p.dtype)]
            if self._b is None:
                ad.launch(plain, p.size, inputs=[g, self.lr], outputs=[p], record_tape=False)
                continue
            b, b_new = self._b[k]
            ad.launch(momentum, p.size, inputs=[g, b, self.lr, self.momentum],
                      outputs=[p, b_new], record_tape=False)
            self._b[k] = [b_new, b]
        self.steps += 1

    def reset_internal_state(self):
        """Forget the momentum: the next step is as a new optimizer's first."""
        for pair in self._b or ():
            for b in pair:
                b.zero_()
        self.steps = 0


class Adam(Optimizer):
    """Adam (Kingma and Ba), bias-corrected, as in PyTorch and ``warp.optim``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, lr)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)
        self._m = [[ad.zeros_like(v, requires_grad=False), ad.zeros_like(v, requires_grad=False)]
                   for v in self._views]
        self._v = [[ad.zeros_like(v, requires_grad=False), ad.zeros_like(v, requires_grad=False)]
                   for v in self._views]
        self._t = [0] * len(self.params)

    def step(self, grads=None):
        self.steps += 1
        for k, p, g in self._grads(grads):
            self._t[k] += 1                 # a parameter's own count (it may be skipped)
            c1, c2 = 1.0 - self.beta1 ** self._t[k], 1.0 - self.beta2 ** self._t[k]
            (m, m_new), (v, v_new) = self._m[k], self._v[k]
            ad.launch(KERNELS[str(p.dtype)][2], p.size,
                      inputs=[g, m, v, self.lr, self.beta1, self.beta2, self.eps, c1, c2],
                      outputs=[p, m_new, v_new], record_tape=False)
            self._m[k], self._v[k] = [m_new, m], [v_new, v]

    def reset_internal_state(self):
        """Forget the moments and the step counts: the next step is as a new optimizer's
        first (Warp's ``Adam.reset_internal_state``)."""
        for pair in self._m + self._v:
            for buf in pair:
                buf.zero_()
        self._t = [0] * len(self.params)
        self.steps = 0
