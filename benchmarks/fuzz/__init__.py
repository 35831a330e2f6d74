"""A differential fuzzer: random valid kernels, adjoint's gradients against finite differences.

    python -m benchmarks.fuzz --count 1000 --seed 0 --backends python,numba --jobs 1

``program`` draws a program (funcs, kernels, a schedule of launches and copies
on one tape) from a seed; ``reference`` runs it as plain Python with a branch
trace; ``check`` runs it on one backend and classifies the result; ``driver``
runs many seeds in worker processes and writes reproducers. See docs/fuzz.md.
"""
