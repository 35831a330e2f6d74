"""``warp.types``: not supported by adjoint.warp; importing it raises."""
from adjoint.warp.errors import refuse

raise refuse("warp.types (Warp's type objects)",
             "adjoint.warp covers kernels, funcs, arrays, launches, tapes and optimizers "
             "(docs/from-warp.md)")
