"""The optimization passes that run after reverse and jvp: each only makes code faster
and can be turned off by name (``ADJOINT_OPTIMIZE``, adjoint/build/passes.py).

store, reciprocal, scale, once, gather, zeroed, cover and eager; the emit-time ones
(firsts, sums, jam) are in adjoint/emit/.
"""
