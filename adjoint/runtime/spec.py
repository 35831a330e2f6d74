"""Launchable descriptions of compiled kernels and funcs (what modules export)."""
import functools
from dataclasses import dataclass

import numpy as np

from ..errors import LaunchError


@dataclass(frozen=True)
class ParamSpec:
    """A kernel parameter: ``ndim == 0`` for a scalar. Its derived facts are computed
    once (``cached_property``: every launch reads them)."""
    name: str
    dtype: str
    ndim: int

    @functools.cached_property
    def is_array(self):
        return self.ndim > 0

    @functools.cached_property
    def np_dtype(self):
        return np.dtype(self.dtype)

    @functools.cached_property
    def has_adjoint(self):
        return self.is_array and self.np_dtype.kind == "f"

    @functools.cached_property
    def plain(self):
        """The kinds of Python scalar a launch passes on as they are for a scalar parameter
        (a float for a float, an int for either): ``{type: True}``; nothing for an array."""
        kind = self.np_dtype.kind
        return {} if self.is_array else {float: True, int: True} if kind == "f" else \
            {int: True} if kind in "iu" else {}

    @functools.cached_property
    def to_scalar(self):
        """A scalar argument as the kernel's compiled code takes it: a Python float or int
        for a 64-bit parameter and for an int narrower than int32 or a uint32 (through
        numpy, so that an int out of the type's range overflows here), a numpy scalar of
        the parameter's dtype otherwise."""
        make = self.np_dtype.type
        if self.np_dtype == np.uint64:      # (its bits as the int64 a kernel holds)
            return lambda value: int(make(value).astype(np.int64))
        if self.np_dtype in (np.float64, np.int64) or (
                self.np_dtype.kind in "iu" and self.np_dtype.itemsize < 4) or \
                self.np_dtype == np.uint32:
            # (a narrow int as the int64 every int of a kernel is, once checked in range)
            return lambda value: make(value).item()
        return make

    def describe(self):
        if self.is_array:
            return f"array(dtype={self.dtype}, ndim={self.ndim})"
        return self.dtype


@dataclass(frozen=True)
class KernelSpec:
    """A kernel's compiled forward/backward pair and its signature."""
    name: str
    params: tuple
    dims: int
    reads: tuple
    writes: tuple
    forward: object
    backward: object
    origin: str = ""
    target: str = "cpu"
    bounds: object = None   # the checked indices (runtime.bounds.Bounds), None if unchecked
    jvp: object = None      # forward mode: primal and tangent arrays in, both written
    saved: tuple = ()       # ((parameter, dtype), ...): what forward_save keeps per thread
    forward_save: object = None     # the forward, also saving ``saved`` (a tape's launch)
    backward_saved: object = None   # the backward, reading ``saved`` instead of replaying loops
    clean_arrays: tuple = ()        # parameters whose adjoint the backward adds into at most
                                    # once per element (optimize/once.py), and the backwards
    backward_clean: object = None   # storing into them: run when all those buffers are clean
    backward_saved_clean: object = None
    zeroed_arrays: tuple = ()       # parameters whose adjoint every backward leaves all zero
                                    # when the grid is the array's shape (optimize/zeroed.py)
    covered_arrays: tuple = ()      # (parameter, extents): a storing backward writes every
                                    # element when the extents are its shape (optimize/cover.py)
    rest_clears: tuple = ()         # parameters whose adjoint a gathered backward's rest only
    backward_norest: object = None  # clears, and the backwards without that pass: their
    backward_norest_clean: object = None    # zeros may be owed instead (runtime/owed.py)
    handed_arrays: tuple = ()       # zeroed parameters whose adjoint the backward reads at
                                    # the thread's element before clearing it: every backward
                                    # takes ``rt_clear`` last, and clears them only if it is true
                                    # (optimize/zeroed.py ``handed``, runtime/steps.py)
    forward_vjp: object = None      # the forward and its VJP in one launch (optimize/eager.py):
    vjp_seeded: str = None          # the one output whose adjoint it reads (1 in a tape's launch),
    vjp_stored: tuple = ()          # the arrays whose adjoint it stores into (no zeros needed
                                    # where covered_arrays says it writes all of it)

    @property
    def spec(self):
        return self

    @functools.cached_property
    def written_arrays(self):
        """Indices of the array parameters the kernel writes (every launch asks)."""
        return tuple(k for k, p in enumerate(self.params) if p.is_array and p.name in self.writes)

    @functools.cached_property
    def read_arrays(self):
        """Indices of the array parameters the kernel reads (a recorded launch's reads)."""
        return tuple(k for k, p in enumerate(self.params) if p.is_array and p.name in self.reads)

    @functools.cached_property
    def array_params(self):
        return tuple(k for k, p in enumerate(self.params) if p.is_array)

    @functools.cached_property
    def read_floats(self):
        """Indices of the float array parameters (those with an adjoint) the kernel reads."""
        return tuple(k for k, p in enumerate(self.params) if p.has_adjoint and p.name in self.reads)

    @functools.cached_property
    def written_floats(self):
        return tuple(k for k, p in enumerate(self.params)
                     if p.has_adjoint and p.name in self.writes)

    @functools.cached_property
    def quieted(self):
        """{part: what runs it}, filled by runtime/verify.py (decided once per part)."""
        return {}

    @functools.cached_property
    def adjoint_params(self):
        """Indices of the parameters with an adjoint argument (float arrays), in order."""
        return tuple(k for k, p in enumerate(self.params) if p.has_adjoint)

    @functools.cached_property
    def rest_clear_adjoints(self):
        """(position among the adjoint arguments, parameter index) of each of the
        ``rest_clears`` (runtime/owed.py ``rest_owed``)."""
        return tuple((j, k) for j, k in enumerate(self.adjoint_params)
                     if self.params[k].name in self.rest_clears)

    @functools.cached_property
    def covered_adjoints(self):
        """{position among the adjoint arguments: extents} of the ``covered_arrays``."""
        whole = dict(self.covered_arrays)
        return {j: whole[self.params[k].name] for j, k in enumerate(self.adjoint_params)
                if self.params[k].name in whole}

    @functools.cached_property
    def clean_adjoints(self):
        """Positions, among the adjoint arguments (one per float array parameter), of
        the ``clean_arrays``: the buffers that must be clean to run a ``_clean`` backward."""
        return tuple(j for j, k in enumerate(self.adjoint_params)
                     if self.params[k].name in self.clean_arrays)

    @functools.cached_property
    def zeroed_adjoints(self):
        """(position among the adjoint arguments, parameter index) of each of the
        ``zeroed_arrays``: the gradients a backward leaves zero (runtime/steps.py)."""
        return tuple((j, k) for j, k in enumerate(self.adjoint_params)
                     if self.params[k].name in self.zeroed_arrays)

    @functools.cached_property
    def handed_adjoints(self):
        """(position among the adjoint arguments, parameter index) of each of the
        ``handed_arrays``."""
        return tuple((j, k) for j, k in enumerate(self.adjoint_params)
                     if self.params[k].name in self.handed_arrays)

    @functools.cached_property
    def vjp_seeded_param(self):
        """The index of the ``vjp_seeded`` parameter, or None."""
        return next((k for k, p in enumerate(self.params) if p.name == self.vjp_seeded), None)

    def __repr__(self):
        return f"<kernel {self.name} from {self.origin}>"


@dataclass(frozen=True)
class FuncSpec:
    """A func's compiled forward and adjoint; calling it runs the forward."""
    name: str
    forward: object
    adjoint: object
    n_params: int
    n_returns: int
    jvp: object = None      # forward mode: (params, tangents of float params) -> values, tangents

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def unavailable(what, reason):
    """A stand-in for a generated function that does not exist: calling it raises a
    ``LaunchError`` saying ``what`` is missing and why."""
    def run(*args):
        raise LaunchError(f"{what}: {reason}")
    run.unavailable = f"{what}: {reason}"     # (a tape refuses before any backward runs)
    return run
