"""Optional systems (Warp, JAX): imported lazily, skipped with a reason.

Both run on the CPU unless ``use_gpu()`` is called first (``run.py --device cuda``).
"""
import functools
import os

_jax_platform = ["cpu"]


def use_gpu():
    """JAX on the GPU (call before the first ``jax()``)."""
    if jax.cache_info().currsize:
        raise RuntimeError("optional.use_gpu() must come before the first optional.jax()")
    _jax_platform[0] = "cuda"


@functools.lru_cache(maxsize=None)
def jax():
    """The ``jax`` module configured for the CPU (or the GPU after ``use_gpu()``), or a
    string saying why it is unavailable."""
    platform = _jax_platform[0]
    os.environ.setdefault("JAX_PLATFORMS", platform)
    try:
        import jax as jax_
        jax_.config.update("jax_platforms", platform)
        # float32 products in float32, as every other system computes them: on a GPU
        # JAX's default precision may round a dot's operands to TF32 (or bf16)
        try:
            jax_.config.update("jax_default_matmul_precision", "highest")
        except Exception:  # noqa: BLE001 - a JAX without the option computes as it did
            pass
        jax_.numpy.zeros(1).block_until_ready()
        if platform == "cuda" and jax_.devices()[0].platform != "gpu":
            return f"jax has no GPU here (devices: {jax_.devices()})"
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


class WarpTapeSystem:
    """What every Warp system does the same way: forward = ``_launch()``; forward +
    backward = record ``_launch()`` on a fresh ``wp.Tape`` (zeroing the previous one)
    and seed the output named ``seed_key`` with a cached Warp copy of the seed.

    Subclasses set ``requires = "warp"``, ``seed_key``, ``self.wp`` and define
    ``_launch()``, ``_seeded()`` (the Warp array to seed) and ``result()``, making
    their arrays and launches on ``self.device``."""
    requires = "warp"
    seed_key = "out"
    device = "cpu"

    def _init_tape(self):
        self.seeds, self.tape = {}, None

    def forward(self):
        self._launch()

    def fwd_bwd(self, seed):
        key = id(seed[self.seed_key])
        if key not in self.seeds:
            self.seeds[key] = self.wp.array(seed[self.seed_key], dtype=self.wp.float32,
                                            device=self.device)
        if self.tape is not None:
            self.tape.zero()
        self.tape = self.wp.Tape()
        with self.tape:
            self._launch()
        self.tape.backward(grads={self._seeded(): self.seeds[key]})
