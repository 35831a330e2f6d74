"""The constructors of the vector types take the same arguments in plain Python and inside
kernels (adjoint/runtime/vectypes.py, ``CONSTRUCTORS``: one table both sides bind
against), as Warp's do, and refuse anything else on both sides (issue 37, item 3:
``ad.transform(p=..., q=...)`` from Python ignored its keywords and gave zeros, and
``ad.transform()`` was zeros where Warp's is the identity).

Each accepted form is built once by a kernel (its components stored into an output
array) and once in Python, and both are compared with the value Warp gives; each refused
form raises a ``TypeError`` in Python and a ``TransformError`` naming the kernel's line
inside a kernel.
"""
import itertools

import numpy as np
import pytest

import adjoint as ad

_names = itertools.count()

P, Q = (1.0, 2.0, 3.0), (0.0, 0.6, 0.0, 0.8)
IDENTITY_Q = (0.0, 0.0, 0.0, 1.0)
R = tuple(float(k + 1) for k in range(16))

# (type, arguments as kernel source, the same as Python values, the expected components)
ACCEPTED = [
    ("vec2", "", (), {}, (0.0, 0.0)),
    ("vec3", "", (), {}, (0.0, 0.0, 0.0)),
    ("vec3", "2.5", (2.5,), {}, (2.5,) * 3),
    ("vec3", "1.0, 2.0, 3.0", P, {}, P),
    ("vec3", "ad.vec3(1.0, 2.0, 3.0)", (np.array(P),), {}, P),
    ("vec4", "1.0, 2.0, 3.0, 4.0", (1.0, 2.0, 3.0, 4.0), {}, (1.0, 2.0, 3.0, 4.0)),
    ("vec4", "-1.0", (-1.0,), {}, (-1.0,) * 4),
    ("mat22", "", (), {}, (0.0,) * 4),
    ("mat22", "1.5", (1.5,), {}, (1.5,) * 4),
    ("mat22", "1.0, 2.0, 3.0, 4.0", (1.0, 2.0, 3.0, 4.0), {}, (1.0, 2.0, 3.0, 4.0)),
    ("mat33", ", ".join(map(str, R[:9])), R[:9], {}, R[:9]),
    ("mat33", "ad.mat33(0.5)", (np.full((3, 3), 0.5),), {}, (0.5,) * 9),
    ("mat44", ", ".join(map(str, R)), R, {}, R),
    ("quat", "", (), {}, (0.0,) * 4),                       # Warp: zeros (quat_identity: 1)
    ("quat", "0.0, 0.6, 0.0, 0.8", Q, {}, Q),
    ("quat", "ad.vec3(0.0, 0.6, 0.0), 0.8", (np.array(Q[:3]), 0.8), {}, Q),
    ("quat", "ad.quat(0.0, 0.6, 0.0, 0.8)", (np.array(Q),), {}, Q),
    ("transform", "", (), {}, (0.0, 0.0, 0.0) + IDENTITY_Q),    # Warp: the identity
    ("transform", "ad.vec3(1.0, 2.0, 3.0), ad.quat(0.0, 0.6, 0.0, 0.8)",
     (np.array(P), np.array(Q)), {}, P + Q),
    ("transform", "p=ad.vec3(1.0, 2.0, 3.0), q=ad.quat(0.0, 0.6, 0.0, 0.8)",
     (), {"p": np.array(P), "q": np.array(Q)}, P + Q),
    ("transform", "q=ad.quat(0.0, 0.6, 0.0, 0.8), p=ad.vec3(1.0, 2.0, 3.0)",
     (), {"q": Q, "p": P}, P + Q),
    ("transform", "ad.vec3(1.0, 2.0, 3.0)", (np.array(P),), {}, P + IDENTITY_Q),
    ("transform", "p=ad.vec3(1.0, 2.0, 3.0)", (), {"p": P}, P + IDENTITY_Q),
    ("transform", "q=ad.quat(0.0, 0.6, 0.0, 0.8)", (), {"q": np.array(Q)}, (0.0,) * 3 + Q),
    ("transform", "ad.vec3(1.0, 2.0, 3.0), q=ad.quat(0.0, 0.6, 0.0, 0.8)",
     (np.array(P),), {"q": np.array(Q)}, P + Q),
    ("transform", ", ".join(map(str, P + Q)), P + Q, {}, P + Q),
    ("transform", "ad.transform(ad.vec3(1.0, 2.0, 3.0))", (np.array(P + IDENTITY_Q),), {},
     P + IDENTITY_Q),
]

# (type, arguments as kernel source, the same as Python values, a part of the message)
REFUSED = [
    ("vec3", "1.0, 2.0", (1.0, 2.0), {}, "ad.vec3() takes"),
    ("vec3", "1.0, 2.0, 3.0, 4.0", (1.0, 2.0, 3.0, 4.0), {}, "ad.vec3() takes"),
    ("vec3", "ad.vec2(1.0, 2.0)", (np.ones(2),), {}, "ad.vec3() takes"),
    ("vec4", "ad.vec3(1.0, 2.0, 3.0), 4.0", (np.ones(3), 4.0), {}, "ad.vec4() takes"),
    ("vec3", "x=1.0, y=2.0, z=3.0", (), {"x": 1.0, "y": 2.0, "z": 3.0},
     "ad.vec3() got an unexpected keyword argument 'x'"),
    ("vec3", "1.0, 2.0, 3.0, dtype=float", P, {"dtype": float},
     "ad.vec3() got an unexpected keyword argument 'dtype'"),
    ("mat22", "ad.vec2(1.0, 2.0), ad.vec2(3.0, 4.0)", (np.ones(2), np.ones(2)), {},
     "row by row"),
    ("mat22", "1.0, 2.0, 3.0", (1.0, 2.0, 3.0), {}, "ad.mat22() takes"),
    ("quat", "x=0.0, y=0.0, z=0.0, w=1.0", (), {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
     "ad.quat() got an unexpected keyword argument"),
    ("transform", "r=ad.quat(0.0, 0.0, 0.0, 1.0)", (), {"r": IDENTITY_Q},
     "ad.transform() got an unexpected keyword argument 'r'"),
    ("transform", "ad.vec3(1.0, 2.0, 3.0), p=ad.vec3(1.0, 2.0, 3.0)", (np.array(P),),
     {"p": P}, "ad.transform(): argument 'p' is given twice"),
    ("transform", "p=ad.quat(0.0, 0.0, 0.0, 1.0)", (), {"p": IDENTITY_Q}, "ad.transform() takes"),
    ("transform", "ad.quat(0.0, 0.0, 0.0, 1.0), ad.vec3(1.0, 2.0, 3.0)",
     (np.array(IDENTITY_Q), np.array(P)), {}, "ad.transform() takes"),
    ("transform", "1.0, 2.0, 3.0", (1.0, 2.0, 3.0), {}, "ad.transform() takes"),
    ("transform", "ad.vec3(1.0, 2.0, 3.0), 1.0, 0.0, 0.0, 0.0", (np.ones(3), 1.0, 0.0, 0.0, 0.0),
     {}, "ad.transform() takes"),
]


def _store(vtype, args):
    """The kernel body storing ``ad.<vtype>(<args>)``'s components: a vector's v[k] needs a
    constant k, so one statement per component."""
    vt = getattr(ad, vtype)
    index = ([f"[{k}]" for k in range(vt.size)] if len(vt.shape) == 1 else
             [f"[{k // vt.shape[1]}, {k % vt.shape[1]}]" for k in range(vt.size)])
    return "\n".join(f"    out[{k}] = v{ix}" for k, ix in enumerate(index))


def _build(kernel_module, vtype, args):
    name = f"build_{next(_names)}"
    m = kernel_module(f"@ad.kernel\ndef {name}(out: ad.array(dtype=float)):\n"
                      f"    i = ad.tid()\n    v = ad.{vtype}({args})\n" + _store(vtype, args) + "\n")
    return getattr(m, name)


@pytest.mark.parametrize("vtype, src, args, kwargs, want", ACCEPTED,
                         ids=[f"{c[0]}({c[1]})" for c in ACCEPTED])
def test_accepted_forms_agree(backend, kernel_module, vtype, src, args, kwargs, want):
    vt = getattr(ad, vtype)
    got = getattr(ad, vtype)(*args, **kwargs)
    assert got.shape == vt.shape and got.dtype == vt.dtype
    np.testing.assert_array_equal(got.ravel(), want)
    dev = "cuda" if backend == "cuda" else "cpu"
    out = ad.zeros(vt.size, device=dev)
    ad.launch(_build(kernel_module, vtype, src), dim=1, outputs=[out])
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("vtype, src, args, kwargs, message", REFUSED,
                         ids=[f"{c[0]}({c[1]})" for c in REFUSED])
def test_refused_forms_raise_on_both_sides(kernel_module, vtype, src, args, kwargs, message):
    with pytest.raises(TypeError) as err:
        getattr(ad, vtype)(*args, **kwargs)
    assert message in str(err.value), str(err.value)
    kernel = _build(kernel_module, vtype, src)
    with pytest.raises(ad.TransformError) as err:
        ad.source(kernel, stage="forward")
    assert message in str(err.value), str(err.value)
    assert err.value.filename.endswith(".py") and f"ad.{vtype}({src})" in str(err.value)


def test_float32_types_take_the_same_forms():
    np.testing.assert_array_equal(ad.transformf(p=P), np.array(P + IDENTITY_Q, np.float32))
    assert ad.transformf().dtype == np.float32 and ad.vec3f(1.0).dtype == np.float32
    with pytest.raises(TypeError, match="unexpected keyword argument 'r'"):
        ad.transformf(r=Q)
