"""Tests of adjoint/optimize: the optimization passes store, reciprocal, scale, once, gather, zeroed, cover, eager."""
