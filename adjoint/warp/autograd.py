"""``warp.autograd``: adjoint's ``jacobian``, ``jacobian_fd`` and ``gradcheck``
(adjoint/derivatives/autograd.py), which take Warp's arguments (kernel, dim, inputs, outputs,
``input_output_mask``, ``eps``, ``atol``, ``rtol``, ``raise_exception``)."""
from adjoint.derivatives.autograd import gradcheck, jacobian, jacobian_fd  # noqa: F401

__all__ = ["gradcheck", "jacobian", "jacobian_fd"]
