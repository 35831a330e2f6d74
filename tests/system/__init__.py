"""Tests of The whole system: fuzzing, random kernels, regressions, reference cases, benchmarks, import layering, public paths."""
