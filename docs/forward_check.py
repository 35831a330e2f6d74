"""capped_sum's Jacobian both ways (run by docs/forward-mode.md)."""
import numpy as np

import adjoint as ad
from stages_example import capped_sum

x = np.array([0.8, 0.3, 1.5])
n, m = 3, len(x)                      # 3 loop iterations; one thread per element

# forward mode: one JVP per input direction e_j gives column j
J_fwd = np.zeros((m, m))
for j, e_j in enumerate(np.eye(m)):
    dots = ad.launch(capped_sum, dim=m, inputs=[n, x], outputs=[np.zeros(m)],
                     tangents={"x": e_j})
    J_fwd[:, j] = dots["out"]

# reverse mode: one VJP per output seed e_i gives row i
J_rev = np.zeros((m, m))
for i, e_i in enumerate(np.eye(m)):
    adj_x = np.zeros(m)
    ad.launch(capped_sum, dim=m, inputs=[n, x], outputs=[np.zeros(m)],
              adjoint=True, adj_inputs=[None, adj_x], adj_outputs=[e_i.copy()])
    J_rev[i, :] = adj_x

print("columns from JVPs:\n", J_fwd)
print("rows from VJPs:\n", J_rev)
print("largest difference:", np.abs(J_fwd - J_rev).max())
