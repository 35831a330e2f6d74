"""The runtime: arrays, launches, the tape and the helpers generated code calls.

Generated modules import only this package (as ``rt``; CUDA modules also numba): never
the transformer, gast or astor.
"""
from .array import Array, array, empty, full, ones, ones_like, zeros, zeros_like
from .bounds import Bounds, Site
from .jit import backend, backend_name, backend_scope, use_backend
from .launch import launch
from .pending import synchronize
from .spec import FuncSpec, KernelSpec, ParamSpec
from .tape import Tape, active_tape, record_copy

__all__ = ["Array", "array", "empty", "full", "ones", "ones_like", "zeros", "zeros_like",
           "Bounds", "Site", "backend", "backend_name", "backend_scope", "use_backend", "launch",
           "synchronize", "FuncSpec", "KernelSpec", "ParamSpec", "Tape", "active_tape", "record_copy"]
