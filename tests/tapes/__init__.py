"""Tests of adjoint/tapes: checkpoint, simulate, optimizers."""
