"""What "the same result" means on each backend, for tests comparing two computations that
run the same arithmetic (a forward and its JVP, a taped and a replayed backward).

On the CPU backends and in numba's CUDA simulator they agree bit for bit. On a real GPU
(the ``cuda`` backend with ``NUMBA_ENABLE_CUDASIM=0``) two things round otherwise, so the
guarantee there is the same result to rounding:

- NVVM contracts ``a * b + c`` into one fused multiply-add (its default ``-fma=1``), and
  where it does so depends on the rest of the kernel: a forward and its JVP, two separate
  kernels, may round one addition differently (one ulp of that operation);
- float atomics (``+=`` into a shared element, ``ad.atomic_add``) add in whatever order
  the threads arrive, which changes from launch to launch (the rounding of a sum of
  ``n`` terms moves by up to about ``n`` ulps of its terms' magnitude).

``assert_same`` compares bit for bit except there, where it allows ``rtol`` times
``scale``: by default the largest magnitude in the expected array, or what the caller
knows the terms of a sum add up to in absolute value. ``RTOL`` is about 4,500 float64
ulps (1e-12) and 84 float32 ulps (1e-5): the H200 run showed differences of at most
2e-15 (float64) of the array's largest magnitude, and 3.6e-6 of a 6,161-term float32 sum
(2.2e-8 of its terms' absolute sum); a wrong, missing or repeated term, or a race, is
orders of magnitude above either.
"""
import numpy as np

import adjoint as ad

RTOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}


def real_gpu(backend=None):
    """Whether ``backend`` (default: the current one) runs kernels on a real GPU: the
    ``cuda`` backend outside numba's simulator."""
    if (backend or ad.backend_name()) != "cuda":
        return False
    import numba
    return not numba.config.ENABLE_CUDASIM


def tolerance(desired, backend=None, scale=None):
    """The absolute difference ``assert_same`` allows from ``desired``: 0 but on a real
    GPU, and for integers (exact everywhere)."""
    desired = np.asarray(desired)
    if not real_gpu(backend) or desired.dtype.kind != "f":
        return 0.0
    if scale is None:
        finite = np.abs(desired[np.isfinite(desired)])
        scale = float(finite.max()) if finite.size else 0.0
    return RTOL.get(desired.dtype, 1e-5) * float(scale)


def assert_same(actual, desired, backend=None, err_msg="", scale=None):
    """``actual`` is ``desired`` bit for bit (nan equal to nan), or on a real GPU equal to
    rounding (see the module docstring); ``scale`` as ``tolerance``."""
    atol = tolerance(desired, backend, scale)
    if atol == 0.0:
        np.testing.assert_array_equal(actual, desired, err_msg=err_msg)
    else:
        np.testing.assert_allclose(actual, desired, rtol=0.0, atol=atol,
                                   err_msg=f"{err_msg} (equal to rounding on a GPU: FMA "
                                   "contraction, the order of atomic additions)")
