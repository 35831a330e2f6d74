"""Tests of adjoint/derive: the core passes (control flow, JVP, hazards, order, parallel plans, inline, atomics)."""
