"""Tests of adjoint/interop: PyTorch, JAX, Dask."""
