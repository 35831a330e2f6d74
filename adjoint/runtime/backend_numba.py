"""The numba CPU backend: ``numba.njit`` with on-disk caching."""
import numba

from . import helpers

NAME = "numba"


def jit(fn):
    return numba.njit(cache=True)(fn)


trip_count = jit(helpers.trip_count)
stack_new = jit(helpers.stack_new)
stack_push = jit(helpers.stack_push)
clamp = jit(helpers.clamp)
