"""Tests of adjoint/runtime: arrays, tapes, launches, bounds and faults, backends, races, value types."""
