"""``warp.sim``: not supported by adjoint.warp; importing it raises."""
from adjoint.warp.errors import refuse

raise refuse("warp.sim (Warp's simulation framework)",
             "adjoint.warp covers kernels, funcs, arrays, launches, tapes and optimizers "
             "(docs/from-warp.md)")
