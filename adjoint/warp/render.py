"""``warp.render``: not supported by adjoint.warp; importing it raises."""
from adjoint.warp.errors import refuse

raise refuse("warp.render (Warp's OpenGL and USD renderers)",
             "adjoint.warp covers kernels, funcs, arrays, launches, tapes and optimizers "
             "(docs/from-warp.md)")
