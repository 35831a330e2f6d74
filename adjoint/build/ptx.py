"""Compile generated CUDA modules to PTX without a GPU: what numba's simulator
cannot check.

The simulator runs generated CUDA kernels as Python, so code that Python runs
but ``numba.cuda`` cannot type or lower (a builtin it types differently, a
dtype it will not mix) passes there and fails on the first real GPU. This
module compiles every grid kernel of a generated CUDA module, forward and
backward (and through them every device function they call), with numba's CUDA
compiler for a chosen compute capability. It needs NVVM (the CUDA toolkit's
``libnvvm``, or ``pip install "numba-cuda[cu12]"``), not a GPU or a driver, and
``NUMBA_ENABLE_CUDASIM`` unset or ``0`` in the process that imports numba.

    python -m adjoint.ptx CACHE_OR_MODULE.py ...     # exit 1 naming what failed

Argument types follow what ``ad.launch`` passes: launch sizes are int64, a
scalar parameter has its declared dtype (``float`` is float64), an array is a
C-contiguous array of its dtype and ndim, ``adj_x`` has the type of ``x``, and
the loop-overflow status is a one-dimensional int64 array.
"""
import argparse
import hashlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass

DEFAULT_CC = (9, 0)


@dataclass
class Compiled:
    """One grid kernel of a module: ``error`` is None when it compiled."""
    module: str
    kernel: str
    error: str = None
    f64: int = 0         # PTX instructions on float64 values (libdevice's included)


def available():
    """``(True, "")`` where PTX can be compiled here, else ``(False, why)``."""
    import numba
    if numba.config.ENABLE_CUDASIM:
        return False, "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1)"
    try:
        from numba import cuda

        @cuda.jit(device=True)
        def probe(x):
            return x + 1.0
        from numba import types
        cuda.compile_ptx(probe.py_func, (types.float64,), device=True, cc=DEFAULT_CC)
    except Exception as exc:  # noqa: BLE001 - NVVM missing shows up as many error types
        return False, f"numba cannot compile CUDA here ({type(exc).__name__}: {exc})"
    return True, ""


def _without_a_device(cc):
    """numba compiles a called device function for the *current* device's compute
    capability; with no GPU, answer with ``cc`` instead of asking the driver."""
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc
    dispatcher.get_current_device = lambda: _Device()


def _numba_type(dtype, ndim):
    from numba import types
    from numba.np.numpy_support import from_dtype
    import numpy as np
    scalar = from_dtype(np.dtype(dtype))
    return types.Array(scalar, ndim, "C") if ndim else scalar


def kernel_signature(fn, spec):
    """numba types of grid kernel ``fn``'s parameters, from the module's KernelSpec."""
    from numba import types
    by_name = {p.name: _numba_type(p.dtype, p.ndim) for p in spec.params}
    # a backward's adjoint arrays (a JVP's tangents) follow the parameters, one per float
    # array, in order
    derived = iter([by_name[p.name] for p in spec.params if p.has_adjoint])
    out = []
    for arg in inspect.signature(fn).parameters:
        if arg.startswith("dim") and arg[3:].isdigit():
            out.append(types.int64)
        elif arg == "rt_status":
            out.append(types.Array(types.int64, 1, "C"))
        elif arg in by_name:
            out.append(by_name[arg])
        else:
            typ = next(derived, None)
            if typ is None:
                raise ValueError(f"{spec.name}: no type for parameter {arg!r} of {fn.__name__}")
            out.append(typ)
    return tuple(out)


def _import(path):
    name = "adjoint_ptx_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_module(path, cc=DEFAULT_CC):
    """Compile every grid kernel of the generated CUDA module at ``path``."""
    from numba import cuda
    from ..runtime.spec import KernelSpec
    _without_a_device(cc)
    module = _import(path)
    results = []
    for spec in [v for v in vars(module).values() if isinstance(v, KernelSpec)]:
        if spec.target != "cuda":
            continue
        for part in ("forward", "backward", "jvp"):
            kernel = getattr(module, f"{spec.name}_{part}", None)
            if kernel is None:
                continue
            label = f"{spec.name}_{part}"
            try:
                fn = kernel.py_func
                ptx, _ = cuda.compile_ptx(fn, kernel_signature(fn, spec), cc=cc)
                results.append(Compiled(path, label, None, f64_instructions(ptx)))
            except Exception as exc:  # noqa: BLE001 - report every failure, keep going
                first = str(exc).strip().splitlines()
                results.append(Compiled(path, label, f"{type(exc).__name__}: "
                                        f"{first[0] if first else ''}"))
    return results


def f64_instructions(ptx):
    """How many PTX instructions touch float64 values (declarations not counted)."""
    return sum(1 for line in ptx.splitlines()
               if ".f64" in line and not line.lstrip().startswith((".reg", "//")))


def cuda_modules(paths):
    """The generated CUDA modules among ``paths`` (files, or folders searched)."""
    files = []
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(f"{p}: no such file or folder")
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".py"))
        else:
            files.append(p)
    out = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            if "@cuda.jit" in fh.read():
                out.append(f)
    return out


def distinct(modules):
    """``(distinct, repeats)``: ``modules`` with each code compiled once (the first path of
    each), and how many were left out. Two modules are the same code when they differ only
    in comments, the module docstring, the ``origin=`` of their specs and the ``file=`` of
    their bounds tables (the name of the source file and its lines): what a test suite
    makes when tests load one kernel's source from files of their own."""
    seen, out = set(), []
    for path in modules:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if text.startswith('"""'):
            text = text[text.index('"""', 3) + 3:]
        key = hashlib.sha256("\n".join(
            line for line in text.splitlines()
            if not line.lstrip().startswith(("#", "origin='", "file='"))
        ).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out, len(modules) - len(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m adjoint.ptx", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="generated CUDA modules, or folders holding them")
    ap.add_argument("--cc", default="9.0", help="compute capability to compile for (default 9.0)")
    ap.add_argument("--f64", action="store_true",
                    help="print each kernel's count of float64 PTX instructions (slow on "
                         "most GPUs; a float32 kernel should have few)")
    args = ap.parse_args(argv)
    try:
        cc = tuple(int(x) for x in args.cc.split("."))
    except ValueError:
        ap.error(f"--cc {args.cc!r}: give a compute capability like 9.0 or 8.6")
    ok, why = available()
    if not ok:
        print(f"cannot compile PTX here: {why}", file=sys.stderr)
        return 2
    try:
        modules = cuda_modules(args.paths)
    except FileNotFoundError as exc:
        print(f"python -m adjoint.ptx: {exc}", file=sys.stderr)
        return 2
    modules, repeats = distinct(modules)
    failed = total = 0
    for path in modules:
        for r in compile_module(path, cc):
            total += 1
            if r.error:
                failed += 1
                print(f"FAILED {r.module}: {r.kernel}: {r.error}")
            elif args.f64:
                print(f"{r.kernel}: {r.f64} float64 instructions")
    if repeats:
        print(f"{repeats} module{'s' if repeats > 1 else ''} the same code as another but for "
              "comments and source names: not compiled again")
    print(f"{total - failed} of {total} CUDA grid kernels compiled to PTX for "
          f"compute capability {args.cc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
