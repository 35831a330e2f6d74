"""Tests of adjoint/frontend: parse, scalarize, components, vector types and structs in kernels, refusals."""
