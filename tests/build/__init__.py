"""Tests of adjoint/build: generate, the command line, the pass list, caches and loading, bindings, PTX."""
