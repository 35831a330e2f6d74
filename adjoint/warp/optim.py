"""``warp.optim``: ``Adam`` and ``SGD`` with Warp's signatures, on ``ad.optim``.

``step(grad)`` takes one gradient array per parameter (Warp's), or none to read each
parameter's ``.grad``; ``set_params`` and ``reset_internal_state`` (``ad.optim``'s) restart
the state.
SGD's ``dampening``, ``weight_decay`` and ``nesterov`` are refused unless left at Warp's
defaults (``ad.optim.SGD`` has none of them).
"""
from adjoint.tapes import optim as _optim
from adjoint.warp.errors import refuse


class Adam(_optim.Adam):
    """``warp.optim.Adam(params=None, lr=0.001, betas=(0.9, 0.999), eps=1e-08)``."""

    def __init__(self, params=None, lr=0.001, betas=(0.9, 0.999), eps=1e-08):
        self._options = dict(lr=lr, betas=betas, eps=eps)
        self.set_params(params or [])

    def set_params(self, params):
        super().__init__(params, **self._options)


class SGD(_optim.SGD):
    """``warp.optim.SGD(params=None, lr=0.001, momentum=0.0)``."""

    def __init__(self, params=None, lr=0.001, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        for what, value in (("dampening", dampening), ("weight_decay", weight_decay),
                            ("nesterov", nesterov)):
            if value:
                raise refuse(f"warp.optim.SGD({what}={value!r})", "adjoint's SGD has "
                             "momentum only")
        self._options = dict(lr=lr, momentum=momentum)
        self.set_params(params or [])

    def set_params(self, params):
        super().__init__(params, **self._options)
