"""Optional systems (Warp CPU, JAX CPU): imported lazily, skipped with a reason."""
import functools
import os


@functools.lru_cache(maxsize=None)
def jax():
    """The ``jax`` module configured for CPU, or a string saying why it is unavailable."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax as jax_
        jax_.config.update("jax_platforms", "cpu")
        jax_.numpy.zeros(1).block_until_ready()
        return jax_
    except Exception as exc:  # ImportError, or a broken install
        return f"jax not importable ({type(exc).__name__}: {exc}); `pip install jax jaxlib` to include it"


@functools.lru_cache(maxsize=None)
def warp():
    """The ``warp`` module initialised (CPU), or a string saying why it is unavailable."""
    try:
        import logging

        import warp as wp
        wp.config.log_level = logging.WARNING   # no banner, no per-module load lines
        wp.init()
        return wp
    except Exception as exc:
        return f"warp not importable ({type(exc).__name__}: {exc}); `pip install warp-lang` to include it"


@functools.lru_cache(maxsize=None)
def warp_kernels():
    wp = warp()
    if isinstance(wp, str):
        return wp
    from . import warp_kernels as wk
    return wk
