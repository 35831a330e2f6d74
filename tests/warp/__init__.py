"""Tests of adjoint/warp: the adjoint.warp namespace and the Warp-style examples."""
