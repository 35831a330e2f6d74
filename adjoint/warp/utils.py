"""``warp.utils``: not supported by adjoint.warp; importing it raises."""
from adjoint.warp.errors import refuse

raise refuse("warp.utils (Warp's array utilities: scans, radix sort, ...)",
             "adjoint.warp covers kernels, funcs, arrays, launches, tapes and optimizers "
             "(docs/from-warp.md)")
