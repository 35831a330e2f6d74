"""The runtime: arrays, launches, the tape and the helpers generated code calls.

Generated modules import only this package (as ``rt``) and ``math``: never
the transformer, gast or astor.
"""
from .array import Array, array, empty, full, ones, ones_like, zeros, zeros_like
from .helpers import clamp, stack_new, stack_push, trip_count
from .jit import JIT_ENABLED, jit
from .launch import launch
from .spec import FuncSpec, KernelSpec, ParamSpec
from .tape import Tape, active_tape, record_copy

__all__ = ["Array", "array", "empty", "full", "ones", "ones_like", "zeros", "zeros_like",
           "clamp", "stack_new", "stack_push", "trip_count", "JIT_ENABLED", "jit", "launch",
           "FuncSpec", "KernelSpec", "ParamSpec", "Tape", "active_tape", "record_copy"]
