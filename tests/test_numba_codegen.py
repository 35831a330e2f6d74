"""What numba and LLVM make of the runtime helpers generated code calls (numba only: the
other backends compile nothing)."""
import re

import numba
import numpy as np

from adjoint.runtime import backend_numba


@numba.njit
def _element(i, a):
    return a[backend_numba.signed(i)]


def test_a_thread_index_is_known_not_negative():
    """``rt.signed`` turns prange's unsigned index into an int64 that LLVM knows is not
    negative, so numba's wraparound of a negative index (a compare and a select per
    access) folds away. With it in place, the heat stencil's ``out[i, j]`` store, made in
    both branches of its ``if``, keeps one address and vectorizes as a plain store; with
    the wraparound left in, LLVM made it a scatter and the forward ran 3x slower."""
    a = np.arange(10.0)
    assert _element(np.uint64(3), a) == 3.0
    assert _element(np.int64(9), a) == 9.0
    ir = "".join(_element.inspect_llvm().values())
    wraps = re.findall(r"icmp (?:slt|sgt|sle|sge) i64 %[\w.]+, (?:0|-1)\b", ir)
    assert wraps == [], wraps
