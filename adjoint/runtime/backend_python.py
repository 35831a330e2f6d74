"""The plain-Python backend: generated code runs as ordinary, debuggable Python."""
from .helpers import clamp, stack_new, stack_push, trip_count  # noqa: F401

NAME = "python"


def jit(fn):
    return fn
