"""A kernel's Jacobian built both ways: columns from JVPs, rows from VJPs.

Forward mode (``ad.launch(..., tangents={"x": e_j})``) runs the kernel's JVP
once per input direction ``e_j`` and gives column ``j`` of the Jacobian, J e_j.
Reverse mode (``ad.launch(..., adjoint=True)`` with output adjoint ``e_i``) runs
the backward once per output and gives row ``i``, e_iᵀ J. Both must agree with
each other and with central finite differences of the forward.

Run:  python examples/jacobian.py
"""
import math

import numpy as np

import adjoint as ad


@ad.kernel
def mix(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):               # every output reads every input
        d = x[k] - 0.5 * float(i)
        if d > 0.0:                  # a branch on the values
            s = s + math.sin(x[k]) * d
        else:
            s = 0.5 * s + x[k] * x[k]
    out[i] = s


def run_forward(xs, m):
    """The outputs ``out`` (``m`` of them) for inputs ``xs``."""
    out = np.zeros(m)
    ad.launch(mix, dim=m, inputs=[len(xs), np.array(xs)], outputs=[out])
    return out


def jacobian_by_jvps(xs, m):
    """Column j is the JVP along the unit input direction e_j: one launch per input."""
    J = np.zeros((m, len(xs)))
    for j, e_j in enumerate(np.eye(len(xs))):
        out = np.zeros(m)
        dots = ad.launch(mix, dim=m, inputs=[len(xs), xs.copy()], outputs=[out],
                         tangents={"x": e_j.copy()})
        J[:, j] = dots["out"]
    return J


def jacobian_by_vjps(xs, m):
    """Row i is the VJP with the output seed e_i: one backward launch per output."""
    J = np.zeros((m, len(xs)))
    for i, e_i in enumerate(np.eye(m)):
        adj_x = np.zeros(len(xs))
        ad.launch(mix, dim=m, inputs=[len(xs), xs.copy()], outputs=[np.zeros(m)],
                  adjoint=True, adj_inputs=[None, adj_x], adj_outputs=[e_i.copy()])
        J[i, :] = adj_x
    return J


def jacobian_by_fd(xs, m, eps=1e-6):
    """Column j by central differences of the forward along e_j."""
    cols = [(run_forward(xs + eps * e, m) - run_forward(xs - eps * e, m)) / (2 * eps)
            for e in np.eye(len(xs))]
    return np.stack(cols, axis=1)


def main():
    xs = np.array([0.3, 1.2, -0.7, 0.9])      # 4 inputs
    m = 3                                     # 3 outputs: J is 3 x 4
    fwd, rev, fd = jacobian_by_jvps(xs, m), jacobian_by_vjps(xs, m), jacobian_by_fd(xs, m)
    show = dict(precision=6, suppress_small=True, floatmode="fixed")
    print(f"J = d out / d x, {m} outputs x {len(xs)} inputs")
    print(f"columns from {len(xs)} JVPs (forward mode):")
    print(np.array2string(fwd, **show))
    print(f"rows from {m} VJPs (reverse mode):")
    print(np.array2string(rev, **show))
    print("central finite differences:")
    print(np.array2string(fd, **show))
    both, vs_fd = np.max(np.abs(fwd - rev)), np.max(np.abs(fwd - fd))
    ok = both <= 1e-12 and vs_fd <= 1e-6
    # the size of a rounding error differs between machines: print its bound, not its value
    print(f"max |JVPs - VJPs| <= 1e-12: {both <= 1e-12}; "
          f"max |JVPs - FD| <= 1e-6: {vs_fd <= 1e-6} -> {'OK' if ok else 'MISMATCH'}")
    if not ok:
        raise SystemExit(f"mismatch: |JVPs - VJPs| = {both:.3e}, |JVPs - FD| = {vs_fd:.3e}")


if __name__ == "__main__":
    main()
