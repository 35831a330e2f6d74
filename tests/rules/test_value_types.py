"""The IR's value types (adjoint/rules/types.py): one object per type knows its zero,
its adjoint/tangent type and how arrays of it are printed, and every name the passes
give a kind carries one."""
import copy
import pickle

import numpy as np
import pytest

import adjoint as ad
from adjoint.build.pipeline import transform
from adjoint.rules.types import BOOL, FLOAT, FLOAT32, INT, ValueType, join, of


def test_each_type_knows_its_zero_adjoint_and_dtypes():
    assert (BOOL.zero, INT.zero, FLOAT.zero) == (False, 0, 0.0)
    assert type(FLOAT.zero) is float and type(INT.zero) is int
    assert FLOAT.adjoint is FLOAT and FLOAT32.adjoint is FLOAT32
    assert INT.adjoint is None and BOOL.adjoint is None
    for t in (BOOL, INT, FLOAT, FLOAT32):
        assert np.dtype(t.dtype).kind == {"bool": "b", "int": "i"}.get(t, "f")
    assert (FLOAT.cuda, FLOAT32.cuda, INT.cuda, BOOL.cuda) == \
        ("float64", "float32", "int64", "int8")
    assert FLOAT.float32() is FLOAT32 and INT.float32() is INT


def test_join_and_names():
    assert join(BOOL, INT) is INT and join(INT, FLOAT) is FLOAT and join("bool") is BOOL
    assert join(None, None) is None and join(None, "int") is INT
    assert FLOAT == "float" and hash(FLOAT) == hash("float") and of("float") is FLOAT
    with pytest.raises(ValueError, match="no value type named 'vec3'"):
        of("vec3")
    for t in (BOOL, INT, FLOAT, FLOAT32):
        assert copy.deepcopy(t) is t and pickle.loads(pickle.dumps(t)) is t


@ad.func
def _scaled(x: float, k: int) -> float:
    y = x
    for j in range(k):
        y = y * x + float(j)
    return y


@ad.kernel
def _uses_every_kind(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    big = x[i] > 1.0
    for j in range(n):
        if big:
            s += _scaled(x[j], j)
    out[i] = s


@pytest.mark.parametrize("fn, role", [(_uses_every_kind, "kernel"), (_scaled, "func")])
def test_every_kind_the_passes_give_is_a_value_type(fn, role):
    tr = transform(fn.pyfunc, role)
    tables = [tr.ssa.kinds, tr.rev.kinds, tr.tangent.kinds, tr.rev.stacks]
    assert all(tables[:3])
    for table in tables:
        for n, kind in table.items():
            assert isinstance(kind, ValueType), (n, kind)
    assert all(isinstance(p.kind, ValueType) for p in tr.pf.params)
    assert all(isinstance(k, ValueType) for k in tr.return_kinds)
    if role == "kernel":
        assert tr.ssa.kinds["big"] is BOOL and tr.ssa.kinds["i"] is INT
        assert all(kind is FLOAT for kind in tr.rev.kinds.values())
