"""Derivatives as values: of funcs (``funcs.py``: ``ad.grad``, ``ad.value_and_grad``,
``ad.jvp``, ``ad.hessian``; ``func_calls.py`` runs a func of arrays in a kernel), of
kernels (``autograd.py``: Jacobians, Hessian-vector products, gradcheck; ``vector_mode.py``:
many tangents a launch), printed as code again (``printed.py``), with the numbers of
one evaluation (``traces.py``, ``trace_record.py``) and as a transpose (``transposes.py``).
"""
from .funcs import Grad, grad, hessian, jvp, value_and_grad

__all__ = ["Grad", "grad", "hessian", "jvp", "value_and_grad"]
