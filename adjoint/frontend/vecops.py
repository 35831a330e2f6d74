"""The vector builtins and operators as scalar expressions (used by pass scalarize).

A vector value is a ``V``: its type (a float64 ``VectorType``: precision is the
kernel's business) and its components, row-major. A component is a gast
expression or a Python float: a float is a *structural* constant (the zeros
of ``identity``, a basis vector), folded away by the ``Builder``
(``0.0 * x`` is 0, ``1.0 * x`` is x) so that ``quat_to_matrix`` reads like its
closed form. A user's own constants are gast nodes and never folded (``0.0 *
inf`` stays nan).

Each builtin takes ``Builder`` ``b`` and its operands and returns a ``V`` or a
scalar expression; ``b.atom`` stores an expression used more than once in a fresh
local first, so nothing is computed twice. Conventions (Warp's): a quaternion is
(x, y, z, w), w the real part; a transform is (p, q); ``m * v`` is the matrix
product; ``length`` and ``normalize`` call ``rt.length3`` and ``rt.div_or_zero``,
whose rules (rules/vectors.py) state the derivative at the zero vector.
"""
from ..runtime.vectypes import TYPES, mat_of, vec_of

QUAT = TYPES[("quat", (4,))]
VEC3 = vec_of(3)


class VectorUseError(Exception):
    """A vector used where it is not supported: pass scalarize reports it with the
    user's file and line."""


class V:
    """A vector value: ``vt`` its float64 type, ``comps`` its components (row-major);
    ``origin``: for an element of an array of vectors (or a row of one), the float array
    and the index atoms it is at (a component index known only at run time indexes the
    array there: frontend/components.py)."""

    def __init__(self, vt, comps, origin=None):
        self.vt = vt.base
        self.comps = list(comps)
        self.origin = origin
        assert len(self.comps) == self.vt.size, (vt, len(self.comps))

    @property
    def n(self):
        return self.vt.shape[0]

    def at(self, i, j=None):
        """Component i (a vector) or (i, j) (a matrix)."""
        return self.comps[i if j is None else i * self.vt.shape[1] + j]


def _check(v, *kinds, what):
    if not isinstance(v, V) or v.vt.kind not in kinds:
        got = v.vt.name if isinstance(v, V) else "a scalar"
        raise VectorUseError(f"{what} takes a {' or '.join(kinds)}, not {got}")
    return v


def _vec(v, what, n=None):
    v = _check(v, "vec", "quat", what=what) if n is None else _check(v, "vec", what=what)
    if n is not None and v.n != n:
        raise VectorUseError(f"{what} takes a vec{n}, not {v.vt.name}")
    return v


def _same(a, b, what):
    if not (isinstance(a, V) and isinstance(b, V)) or a.vt is not b.vt:
        names = [x.vt.name if isinstance(x, V) else "a scalar" for x in (a, b)]
        raise VectorUseError(f"{what} of {names[0]} and {names[1]} is not supported")


# -- sums and products ---------------------------------------------------------------

def _sum(b, terms):
    total = 0.0
    for t in terms:
        total = b.add(total, t)
    return total


def dot(b, x, y):
    x, y = b.atoms(_vec(x, "dot")), b.atoms(_vec(y, "dot"))
    _same(x, y, "dot")
    return _sum(b, [b.mul(p, q) for p, q in zip(x.comps, y.comps)])


def length_sq(b, v):
    return dot(b, v, v)


def length(b, v):
    v = b.atoms(_vec(v, "length"))
    return _length(b, v.comps)


def _length(b, comps):
    """The length of ``comps`` by the rules ``ad.length2/3/4`` (their derivative is 0 at
    the origin): a longer vector's is the length of its groups' lengths, four at a time
    (a vec6's is ``length2(length4(v0..v3), length2(v4, v5))``), 0 at the origin too."""
    if len(comps) == 1:
        return b.call("abs", comps[0])
    if len(comps) <= 4:
        return b.call(f"length{len(comps)}", *comps)
    parts = [_length(b, comps[k:k + 4]) if len(comps[k:k + 4]) > 1 else comps[k]
             for k in range(0, len(comps), 4)]
    return _length(b, [b.atom(p, "norm") for p in parts])


def normalize(b, v):
    v = b.atoms(_vec(v, "normalize"))
    n = b.atom(length(b, v), "norm")
    return V(v.vt, [b.call("div_or_zero", c, n) for c in v.comps])


def cross(b, x, y):
    x, y = b.atoms(_vec(x, "cross", 3)), b.atoms(_vec(y, "cross", 3))
    (x0, x1, x2), (y0, y1, y2) = x.comps, y.comps
    return V(VEC3, [b.sub(b.mul(x1, y2), b.mul(x2, y1)), b.sub(b.mul(x2, y0), b.mul(x0, y2)),
                    b.sub(b.mul(x0, y1), b.mul(x1, y0))])


def cw(b, op, x, y):
    _same(x, y, "a componentwise operation")
    return V(x.vt, [op(p, q) for p, q in zip(x.comps, y.comps)])


def scale(b, v, s, op=None):
    s = b.atom(s, "s")
    op = op or b.mul
    return V(v.vt, [op(c, s) for c in v.comps])


def matvec(b, m, v):
    m, v = b.atoms(m), b.atoms(v)
    rows, cols = m.vt.shape
    if v.vt.kind != "vec" or v.n != cols:
        raise VectorUseError(f"{m.vt.name} * {v.vt.name}: the sizes do not match")
    return V(vec_of(rows), [_sum(b, [b.mul(m.at(i, j), v.at(j)) for j in range(cols)])
                            for i in range(rows)])


def vecmat(b, v, m):
    m, v = b.atoms(m), b.atoms(v)
    rows, cols = m.vt.shape
    if v.vt.kind != "vec" or v.n != rows:
        raise VectorUseError(f"{v.vt.name} * {m.vt.name}: the sizes do not match")
    return V(vec_of(cols), [_sum(b, [b.mul(v.at(i), m.at(i, j)) for i in range(rows)])
                            for j in range(cols)])


def matmat(b, x, y):
    x, y = b.atoms(x), b.atoms(y)
    (rows, n), (inner, cols) = x.vt.shape, y.vt.shape
    if inner != n:
        raise VectorUseError(f"{x.vt.name} * {y.vt.name}: the sizes do not match")
    return V(mat_of(rows, cols), [_sum(b, [b.mul(x.at(i, k), y.at(k, j)) for k in range(n)])
                                  for i in range(rows) for j in range(cols)])


# -- matrices ------------------------------------------------------------------------

def _mat(m, what):
    return _check(m, "mat", what=what)


def _square(m, what, most=None):
    m = _mat(m, what)
    rows, cols = m.vt.shape
    if rows != cols or (most is not None and rows > most):
        raise VectorUseError(f"{what} takes a square matrix" +
                             (f" of 2 to {most} rows" if most else "") +
                             f", not a {m.vt.name}")
    return m


def transpose(b, m):
    m = _mat(m, "transpose")
    rows, cols = m.vt.shape
    return V(mat_of(cols, rows), [m.at(j, i) for i in range(cols) for j in range(rows)])


def trace(b, m):
    m = _square(m, "trace")
    return _sum(b, [m.at(i, i) for i in range(m.n)])


def outer(b, x, y):
    x, y = b.atoms(_vec(x, "outer")), b.atoms(_vec(y, "outer"))
    return V(mat_of(x.n, y.n), [b.mul(p, q) for p in x.comps for q in y.comps])


def diag(b, v):
    v = _vec(v, "diag")
    n = v.n
    return V(mat_of(n), [v.at(i) if i == j else 0.0 for i in range(n) for j in range(n)])


def identity(b, n):
    return V(mat_of(n), [1.0 if i == j else 0.0 for i in range(n) for j in range(n)])


def skew(b, v):
    x, y, z = b.atoms(_vec(v, "skew", 3)).comps
    return V(mat_of(3), [0.0, b.neg(z), y, z, 0.0, b.neg(x), b.neg(y), x, 0.0])


def _det(b, m, rows, cols):
    """Determinant of the submatrix of ``m`` on ``rows`` x ``cols`` (Laplace, first row)."""
    if len(rows) == 1:
        return m.at(rows[0], cols[0])
    if len(rows) == 2:
        return b.sub(b.mul(m.at(rows[0], cols[0]), m.at(rows[1], cols[1])),
                     b.mul(m.at(rows[0], cols[1]), m.at(rows[1], cols[0])))
    total = 0.0
    for k, c in enumerate(cols):
        minor = b.atom(_det(b, m, rows[1:], cols[:k] + cols[k + 1:]), "minor")
        term = b.mul(m.at(rows[0], c), minor)
        total = b.add(total, term) if k % 2 == 0 else b.sub(total, term)
    return total


def determinant(b, m):
    m = b.atoms(_square(m, "determinant", 4))
    idx = tuple(range(m.n))
    return _det(b, m, idx, idx)


def inverse(b, m):
    """The adjugate over the determinant (a singular matrix gives inf and nan, as any
    division by zero does)."""
    m = b.atoms(_square(m, "inverse", 4))
    n = m.n
    idx = tuple(range(n))
    det = b.atom(_det(b, m, idx, idx), "det")
    comps = []
    for i in range(n):
        for j in range(n):
            # (adj m)[i][j] = (-1)^(i+j) * minor(j, i)
            rows, cols = idx[:j] + idx[j + 1:], idx[:i] + idx[i + 1:]
            cof = _det(b, m, rows, cols)
            comps.append(b.div(cof if (i + j) % 2 == 0 else b.neg(cof), det))
    return V(m.vt, comps)


def matrix_from_rows(b, *rows):
    """The matrix whose rows are the vectors ``rows`` (Warp's ``matrix_from_rows``)."""
    rows = [_vec(r, "matrix_from_rows") for r in rows]
    if not rows or len({r.n for r in rows}) != 1:
        raise VectorUseError("matrix_from_rows takes one or more vectors of one length")
    return V(mat_of(len(rows), rows[0].n), [c for r in rows for c in r.comps])


def matrix_from_cols(b, *cols):
    """The matrix whose columns are the vectors ``cols`` (Warp's ``matrix_from_cols``)."""
    cols = [_vec(c, "matrix_from_cols") for c in cols]
    if not cols or len({c.n for c in cols}) != 1:
        raise VectorUseError("matrix_from_cols takes one or more vectors of one length")
    n = cols[0].n
    return V(mat_of(n, len(cols)), [c.at(i) for i in range(n) for c in cols])


# -- quaternions ---------------------------------------------------------------------

def _quat(q, what):
    return _check(q, "quat", what=what)


def quat_identity(b):
    return V(QUAT, [0.0, 0.0, 0.0, 1.0])


def quat_inverse(b, q):
    q = _quat(q, "quat_inverse")
    return V(QUAT, [b.neg(c) for c in q.comps[:3]] + [q.comps[3]])


def quat_mul(b, q, r):
    q, r = b.atoms(_quat(q, "*")), b.atoms(_quat(r, "*"))
    qv, qw, rv, rw = V(VEC3, q.comps[:3]), q.comps[3], V(VEC3, r.comps[:3]), r.comps[3]
    c = cross(b, qv, rv)
    v = [b.add(b.add(b.mul(qw, rv.at(i)), b.mul(rw, qv.at(i))), c.at(i)) for i in range(3)]
    return V(QUAT, v + [b.sub(b.mul(qw, rw), dot(b, qv, rv))])


def _rotate(b, q, v, sign):
    q, v = b.atoms(_quat(q, "quat_rotate")), b.atoms(_vec(v, "quat_rotate", 3))
    qv, w = V(VEC3, q.comps[:3]), q.comps[3]
    a = b.atom(b.sub(b.mul(b.mul(2.0, w), w), 1.0), "a")
    c = cross(b, qv, v)
    w2 = b.atom(b.mul(2.0, w), "w2") if sign else None
    d2 = b.atom(b.mul(2.0, dot(b, qv, v)), "d2")
    out = []
    for i in range(3):
        t = b.add(b.mul(v.at(i), a), b.mul(qv.at(i), d2))
        out.append(b.add(t, b.mul(c.at(i), w2)) if sign > 0 else b.sub(t, b.mul(c.at(i), w2)))
    return V(VEC3, out)


def quat_rotate(b, q, v):
    return _rotate(b, q, v, 1)


def quat_rotate_inv(b, q, v):
    return _rotate(b, q, v, -1)


def quat_from_axis_angle(b, axis, angle):
    if isinstance(angle, V):
        raise VectorUseError("quat_from_axis_angle takes a vec3 and a scalar angle")
    n = normalize(b, _vec(axis, "quat_from_axis_angle", 3))
    half = b.atom(b.mul(angle, 0.5), "half")
    s = b.atom(b.call("sin", half), "s")
    return V(QUAT, [b.mul(c, s) for c in n.comps] + [b.call("cos", half)])


def quat_to_matrix(b, q):
    """Columns: q rotating the basis vectors (Warp's definition, also for a quaternion
    that is not a unit one): m[i][j] = d_ij (2w^2 - 1) + 2w (v x e_j)_i + 2 v_i v_j."""
    q = b.atoms(_quat(q, "quat_to_matrix"))
    x, y, z, w = q.comps
    a = b.atom(b.sub(b.mul(b.mul(2.0, w), w), 1.0), "a")
    w2 = b.atom(b.mul(2.0, w), "w2")
    v = (x, y, z)
    comps = []
    for i in range(3):
        for j in range(3):
            term = b.mul(b.mul(2.0, v[i]), v[j])
            k = 3 - i - j if i != j else None      # (v x e_j)_i = eps_ikj v_k
            if k is not None:
                sign = 1 if (i, k, j) in ((0, 1, 2), (1, 2, 0), (2, 0, 1)) else -1
                rot = b.mul(w2, v[k])
                term = b.add(term, rot) if sign > 0 else b.sub(term, rot)
            comps.append(b.add(a, term) if i == j else term)
    return V(mat_of(3), comps)


def _rotation_block(m):
    """The top-left 3x3 block of a mat44 (a homogeneous transform's rotation part)."""
    return V(mat_of(3), [m.at(i, j) for i in range(3) for j in range(3)])


def quat_from_matrix(b, m):
    """Warp's branches on the trace and the largest diagonal entry, then normalized; of a
    mat44, those of its top-left 3x3 block (Warp's; the other entries are ignored)."""
    m = _mat(m, "quat_from_matrix")
    if m.vt.shape == (4, 4):
        m = _rotation_block(m)
    if m.vt.shape != (3, 3):
        raise VectorUseError(f"quat_from_matrix takes a mat33 or a mat44, not {m.vt.name}")
    m = b.atoms(m)
    names = b.fresh_group("qm", QUAT.comps)
    tr = b.atom(_sum(b, [m.at(0, 0), m.at(1, 1), m.at(2, 2)]), "tr")

    def case(i, diag):
        j, k = (i + 1) % 3, (i + 2) % 3
        with b.block() as stmts:
            h = b.atom(b.call("sqrt", b.add(diag, 1.0)), "h")
            r = b.atom(b.div(0.5, h), "r")
            if i == 3:
                vals = {3: b.mul(0.5, h), 0: b.mul(b.sub(m.at(2, 1), m.at(1, 2)), r),
                        1: b.mul(b.sub(m.at(0, 2), m.at(2, 0)), r),
                        2: b.mul(b.sub(m.at(1, 0), m.at(0, 1)), r)}
            else:
                vals = {i: b.mul(0.5, h), j: b.mul(b.add(m.at(i, j), m.at(j, i)), r),
                        k: b.mul(b.add(m.at(k, i), m.at(i, k)), r),
                        3: b.mul(b.sub(m.at(k, j), m.at(j, k)), r)}
            for c in range(4):
                b.assign(names[c], vals[c])
        return stmts

    def diag_case(i):
        j, k = (i + 1) % 3, (i + 2) % 3
        return case(i, b.sub(m.at(i, i), b.add(m.at(j, j), m.at(k, k))))

    # i = 0, 1 or 2: the largest diagonal entry, the first one on ties (Warp's order)
    b.emit_if(b.compare(tr, ">=", 0.0), case(3, tr),
              [b.if_stmt(b.both(b.compare(m.at(1, 1), ">", m.at(0, 0)),
                                b.compare(m.at(2, 2), "<=", m.at(1, 1))), diag_case(1),
                         [b.if_stmt(b.both(b.compare(m.at(2, 2), ">", m.at(0, 0)),
                                           b.compare(m.at(2, 2), ">", m.at(1, 1))),
                                    diag_case(2), diag_case(0))])])
    return normalize(b, V(QUAT, [b.load(n) for n in names]))
