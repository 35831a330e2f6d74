"""The messages of pass parse for a call a kernel or func cannot make (a NumPy function,
``math.<name>`` without a rule, a kernel, a plain Python function, ``ad.grad``): what was
called and what to write instead."""
import inspect
import math

from ..rules import RULES
from ..runtime import builtins as adb
from ..runtime.vecfuncs import CALLABLE as VECTOR_CALLABLES

# NumPy's names of math functions kernels spell otherwise (np.arctan2 is math.atan2)
NUMPY_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
               "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "power": "pow",
               "absolute": "abs", "minimum": "min", "maximum": "max", "fmin": "min",
               "fmax": "max", "clip": "clamp", "linalg.norm": "length"}
# adjoint's derivatives of funcs, which run in plain Python, not in kernels and funcs
PYTHON_ONLY = ("grad", "value_and_grad", "jvp", "hessian")
PYTHON_ONLY_MODULE = "adjoint.derivatives.funcs"    # (their __module__)



def unsupported_call(obj, spelled, callables, fname="f"):
    """The message for a call of ``obj`` (written ``spelled``, its first argument
    ``fname``; ``callables``: what kernels call, by id: parse's ``CALLABLES``), which a kernel
    or func cannot call."""
    name = getattr(obj, "__name__", repr(obj))
    module = getattr(obj, "__module__", None) or ""
    if module == PYTHON_ONLY_MODULE and name in PYTHON_ONLY:
        return python_only(spelled, fname)
    if module.partition(".")[0] == "numpy":
        return _numpy_call(spelled, name, module, callables)
    if getattr(obj, "__module__", None) == "math" and getattr(math, name, None) is obj:
        known = sorted({s for r in RULES.values() for s in r.spellings if s.startswith("math.")})
        return (f"math.{name} is not supported in kernels and funcs (it has no derivative "
                f"rule); the math functions that are: {', '.join(known)}")
    if hasattr(obj, "spec_for"):                       # an @ad.kernel
        return (f"kernel '{obj.name}' cannot be called inside a kernel or func (a kernel is "
                "launched, with ad.launch): write the code both share as an @ad.func")
    if inspect.isfunction(obj):
        return (f"'{name}' is a plain Python function: decorate it with @ad.func (its "
                "parameters annotated, as a kernel's) to call it inside a kernel or func")
    return (f"call to unsupported function '{name}' (only math.* functions with a derivative "
            "rule, ad.* and @ad.func functions can be called)")


def python_only(spelled, fname="f"):
    """The message for ``ad.grad`` (``spelled``), ``ad.jvp``, ... of func ``fname`` in a
    kernel or func."""
    return (f"{spelled} is Python-only: it calls the derivative of a func from plain Python "
            f"({spelled}({fname})(...) outside kernels), not inside a kernel or func. For the "
            "gradients of a kernel's outputs (through the funcs it calls), launch it on an "
            "ad.Tape and call tape.backward() from Python; for the derivative of "
            f"'{fname}' as a value inside a kernel, make its JVP a func outside the kernel, "
            f"{fname}_jvp = adjoint.printed.jvp_func({fname}), and call that: "
            f"value, dvalue = {fname}_jvp(x, 1.0)")


def _numpy_call(spelled, name, module, callables):
    """The message for a NumPy function (``np.sin``, written ``spelled``) in a kernel or
    func: the spellings of the same function a kernel calls, where there are some."""
    qualified = module.partition(".")[2] + "." + name if "." in module else name
    n = NUMPY_NAMES.get(qualified, name)
    known = {s for r in RULES.values() for s in r.spellings}
    ours = adb.MATH.get(n, getattr(adb, n, None))
    options = [s for s in (f"math.{n}", n) if s in known]
    if (ours is not None and id(ours) in callables) or n in VECTOR_CALLABLES:
        options.append(f"ad.{n}")
    if not options:
        return (f"{spelled} is NumPy's: NumPy functions cannot be called in kernels and funcs "
                "(they take one number at a time): call math.* and ad.* functions (the list "
                "is in docs/language.md), or write it as an @ad.func")
    alt = options[0] + (f" (or {', '.join(options[1:])})" if options[1:] else "")
    return (f"{spelled} is NumPy's: kernels and funcs call {alt} instead, on one number at "
            "a time, with its derivative rule")
