"""Math functions numba's loop vectorizer can vectorize: glibc's libmvec.

Expects: numba and llvmlite (imported by the numba CPU backend only). Guarantees:
``spelling(builtin)`` is the function numba compiles for ``rt.<name>`` on the CPU;
``MODE`` says which vector functions it uses (``RUNTIME_FINGERPRINT`` holds it).

Why: numba lowers ``math.sin`` to ``llvm.sin``; LLVM's loop vectorizer widens the loop
around it, but without a vector math library calls the scalar ``sinf`` once per lane.
The llvmlite on PyPI cannot name a vector library (numba's SVML needs a special
build). glibc ships one, libmvec (``_ZGVdN8v_sinf``: eight float32 sines in AVX2
registers), and LLVM finds a function's vector variants in the
``vector-function-abi-variant`` attribute of the function a loop calls (the way
OpenMP's ``declare simd`` reaches it).

How: on x86-64 Linux a unary math function of a float compiles to a call of a small
function of adjoint's own, ``adjoint._ZGVdN8v_sinf``: the libmvec variant applied to
eight copies of the argument, lane 0 returned, not inlined, and with that attribute
naming the variant itself. A loop the vectorizer widens calls the variant on eight
float32 or four float64 lanes at a time (four and two without AVX2); anything else
calls the function. Every value is therefore libmvec's, bit for bit, however the loop
around it was compiled: a forward and a JVP launch, a serial and a parallel one, a
vectorized loop and its scalar remainder agree.

The variants are glibc's own (libmvec.so.1, loaded into the process here): at most
4 ulp from the exact result, with the C functions' special values, so a kernel's values
can differ in the last bits from the Python backend's. ``ADJOINT_VECTOR_MATH=0`` turns
them off. ``sqrt`` is an instruction the vectorizer widens by itself, and CUDA compiles
``ieee.py``'s spelling: neither is changed here. See docs/semantics.md, "Vector math
on the CPU".
"""
import ctypes
import ctypes.util
import os
import platform
import sys

import llvmlite.binding as llvm
from llvmlite import ir
from llvmlite.ir.values import FunctionAttributes
from numba.core import config as numba_config
from numba.core import types
from numba.extending import intrinsic

# rt.<name>: the C function of that name (float64) and of that name + "f" (float32)
FUNCTIONS = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
             "asinh", "acosh", "atanh", "exp", "expm1", "log", "log1p", "log2", "log10",
             "erf", "erfc")
_VARIANT_ATTR = "vector-function-abi-variant"


def _isa():
    """(ISA letter, vector bits) of the libmvec variants numba's target can call, or None.

    ``d`` (AVX2, 256-bit registers) where numba compiles for this machine's CPU and it
    has AVX2; else ``b`` (SSE, 128 bits: every x86-64). A ``<8 x float>`` argument is in
    one ymm register only where the target has AVX: a target named otherwise
    (``NUMBA_CPU_NAME``) gets the SSE variants."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not sys.platform.startswith("linux"):
        return None
    host = numba_config.CPU_NAME in (None, "host") and not numba_config.CPU_FEATURES
    if host and "avx2" in _host_features():
        return "d", 256
    return "b", 128


def _host_features():
    try:
        return {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",")
                if f.startswith("+")}
    except RuntimeError:
        return set()


def _load():
    """{C name: libmvec variant name} for every function in FUNCTIONS this machine's
    libmvec has, with the library loaded for numba's linker, and what it is; {} where
    there is none or ``ADJOINT_VECTOR_MATH=0``."""
    if os.environ.get("ADJOINT_VECTOR_MATH", "1").strip().lower() in ("0", "false", "no", "off"):
        return {}, "off"
    isa = _isa()
    path = ctypes.util.find_library("mvec") if isa else None
    if path is None:
        return {}, "off"
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return {}, "off"
    letter, bits = isa
    variants = {}
    for name in FUNCTIONS:
        for cname, lanes in ((name, bits // 64), (name + "f", bits // 32)):
            vname = f"_ZGV{letter}N{lanes}v_{cname}"
            if hasattr(lib, vname):
                variants[cname] = (vname, lanes)
    if not variants:
        return {}, "off"
    llvm.load_library_permanently(path)
    return variants, f"libmvec-{letter}{bits}"


VARIANTS, MODE = _load()


class _Attributes(FunctionAttributes):
    """A function's attributes, with string attributes (``"key"="value"``) after them:
    llvmlite's own set takes only the attributes it knows by name."""

    def __init__(self, args=(), strings=()):
        super().__init__(args)
        self.strings = tuple(strings)

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in self.strings]


def _function(module, cname, fty):
    """The scalar function ``rt.<name>`` calls in ``module``: where libmvec has a variant,
    that variant applied to a vector of copies of the argument (lane 0 returned), named
    as its own scalar variant; else the C function. Not inlined, so that the vectorizer
    sees the call: a vectorized loop and a scalar one, a JVP and a forward, compute
    every value with the same code, bit for bit."""
    if cname not in VARIANTS:
        fn = module.globals.get(cname)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(fty, [fty]), cname)
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")
        return fn
    vname, lanes = VARIANTS[cname]
    name = f"adjoint.{vname}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    vty = ir.VectorType(fty, lanes)
    vfn = module.globals.get(vname)
    if vfn is None:
        vfn = ir.Function(module, ir.FunctionType(vty, [vty]), vname)
        vfn.attributes.add("nounwind")
        vfn.attributes.add("readnone")
    fn = ir.Function(module, ir.FunctionType(fty, [fty]), name)
    # not internal: LLVM may rename an internal function when numba links modules that
    # each define it (adjoint._ZGVdN4v_sin.21), or change it where a caller passes a
    # constant; its variant attribute, which names it, then no longer matches and the
    # module fails to verify (tests/runtime/test_simd.py). linkonce_odr: one definition, as written
    fn.linkage = "linkonce_odr"
    fn.attributes = _Attributes(("noinline", "nounwind", "readnone"),
                                [(_VARIANT_ATTR, f"_ZGV_LLVM_N{lanes}v_{name}({vname})")])
    builder = ir.IRBuilder(fn.append_basic_block())
    lane0 = builder.insert_element(ir.Constant(vty, None), fn.args[0], ir.Constant(ir.IntType(32), 0))
    copies = builder.shuffle_vector(lane0, ir.Constant(vty, None),
                                    ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))
    builder.ret(builder.extract_element(builder.call(vfn, [copies]),
                                        ir.Constant(ir.IntType(32), 0)))
    return fn


def _unary(name):
    """An intrinsic computing C's ``name`` of a float (float32: ``namef``) or an int
    (as float64, as numba's ``math.name`` does)."""
    def typer(typingctx, x):
        if isinstance(x, types.Float):
            return x(x)
        if isinstance(x, (types.Integer, types.Boolean)):
            return types.float64(x)
        return None

    def codegen(context, builder, sig, args):
        out = sig.return_type
        fty = context.get_value_type(out)
        value = context.cast(builder, args[0], sig.args[0], out)
        cname = name + "f" if out == types.float32 else name
        return builder.call(_function(builder.module, cname, fty), [value])

    def wrapper(typingctx, x):
        sig = typer(typingctx, x)
        return None if sig is None else (sig, codegen)
    wrapper.__name__ = f"vector_{name}"
    return intrinsic(wrapper)


def spelling(builtin):
    """What numba compiles for ``rt.<builtin.name>`` on the CPU: a call of the vectorizable
    C function for FUNCTIONS (where libmvec is in use), else the builtin's own."""
    if builtin.name not in FUNCTIONS or not VARIANTS:
        return builtin.compiled
    fn = _unary(builtin.name)

    def call(x):
        return fn(x)
    call.__name__ = call.__qualname__ = builtin.name
    return call
