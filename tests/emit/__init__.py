"""Tests of adjoint/emit: printed modules, IEEE spellings, float32, print, and the emit-time optimizations firsts, sums, jam."""
