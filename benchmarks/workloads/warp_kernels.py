"""Warp kernels of the five workloads, written as a Warp user would (CPU device).

Imported only when ``warp`` is importable (see ``optional.warp_kernels``).
"""
import warp as wp


@wp.kernel
def wave(x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v = x[i]
    out[i] = wp.sin(v) * wp.exp(-v * v) + v


@wp.kernel
def spring_energy(a: wp.array(dtype=wp.int32), b: wp.array(dtype=wp.int32),
                  rest: wp.array(dtype=wp.float32), k: wp.float32,
                  pos: wp.array(dtype=wp.vec3), energy: wp.array(dtype=wp.float32)):
    s = wp.tid()
    d = wp.length(pos[a[s]] - pos[b[s]]) - rest[s]
    wp.atomic_add(energy, 0, k * d * d)


@wp.kernel
def nbody_energy(n: int, eps2: wp.float32, mass: wp.array(dtype=wp.float32),
                 pos: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)):
    # Written as out[i] = -sum_j m_i m_j / r_ij rather than -m_i * (sum_j m_j / r_ij):
    # Warp's backward of a dynamic loop replays the loop-carried ``e`` with a wrong
    # value after the loop (REFERENCE-CASES.md #6), so d/dmass of the natural form
    # is wrong; with the product inside the loop, ``e`` is only used linearly.
    i = wp.tid()
    pi = pos[i]
    mi = mass[i]
    e = float(0.0)
    for j in range(n):
        d = pos[j] - pi
        e += mi * mass[j] / wp.sqrt(wp.dot(d, d) + eps2)
    out[i] = -e


@wp.kernel
def nbody_energy_natural(n: int, eps2: wp.float32, mass: wp.array(dtype=wp.float32),
                         pos: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)):
    # the same kernel as adjoint's; Warp's d/dmass is wrong for it (see above)
    i = wp.tid()
    pi = pos[i]
    e = float(0.0)
    for j in range(n):
        d = pos[j] - pi
        e += mass[j] / wp.sqrt(wp.dot(d, d) + eps2)
    out[i] = -mass[i] * e


@wp.kernel
def heat_step(alpha: wp.float32, u: wp.array2d(dtype=wp.float32),
              out: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    nx = u.shape[0]
    ny = u.shape[1]
    c = u[i, j]
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1:
        out[i, j] = c + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * c)
    else:
        out[i, j] = c


@wp.kernel
def heat_periodic(alpha: wp.float32, u: wp.array2d(dtype=wp.float32),
                  out: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    jp = j + 1
    if jp == n1:
        jp = 0
    jm = j - 1
    if jm < 0:
        jm = n1 - 1
    c = u[i, j]
    out[i, j] = c + alpha * (u[ip, j] + u[im, j] + u[i, jp] + u[i, jm] - 4.0 * c)


@wp.kernel
def dense_tanh_natural(n: int, W: wp.array2d(dtype=wp.float32), x: wp.array(dtype=wp.float32),
               b: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    y[i] = wp.tanh(s)


# Warp's gradient of dense_tanh_natural is wrong: the backward evaluates tanh'(s)
# with a wrong value of the loop-carried ``s`` (REFERENCE-CASES.md #6). The usual
# workaround: two launches, so that ``s`` is only used linearly after the loop.
@wp.kernel
def dense_affine(n: int, W: wp.array2d(dtype=wp.float32), x: wp.array(dtype=wp.float32),
                 b: wp.array(dtype=wp.float32), z: wp.array(dtype=wp.float32)):
    i = wp.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    z[i] = s


@wp.kernel
def tanh_(z: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = wp.tanh(z[i])
