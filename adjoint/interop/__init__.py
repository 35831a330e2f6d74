"""adjoint beside other frameworks: PyTorch (``torch.py``), JAX (``jax.py``) and Dask
(``distributed.py``). Each is imported only when asked for (its framework is optional)."""
