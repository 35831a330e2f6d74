"""``warp.fem``: not supported by adjoint.warp; importing it raises."""
from adjoint.warp.errors import refuse

raise refuse("warp.fem (Warp's finite-element toolkit)",
             "adjoint.warp covers kernels, funcs, arrays, launches, tapes and optimizers "
             "(docs/from-warp.md)")
