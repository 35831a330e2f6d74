"""The value types of the IR: what every name of a transformed function holds.

A type is an object that knows, in one place, what the passes and the printers
would otherwise each keep a table for:

- ``zero``: its zero, as a Python value (the start of an accumulation, a
  declared local's first value, a default);
- ``adjoint``: the type of its adjoint and of its tangent (the same type for a
  float; ``None`` for an int or a bool, which have no derivative);
- ``dtype``: the numpy dtype of an array holding it (loop stacks on the CPU,
  values saved per thread by the store policy) and ``cuda``: the numba type of
  a CUDA local array holding it;
- ``rank``: its place in the join ``bool < int < float`` (an int meeting a
  float is a float);
- ``float32()``: the type a float32 kernel computes it in.

Each scalar type *is* its name, a ``str`` ("float", "int", "bool",
"float32"): code and tables written against kind names keep working, and
``kind == "float"`` still reads as it did. New value types (vectors,
matrices, structs) are new ``ValueType`` objects with their own zero, adjoint
and printing, not new passes.
"""


class ValueType(str):
    """A value type (see the module docstring); equal to, and hashed as, its name."""

    def __new__(cls, name, zero, dtype, cuda, rank, differentiable, element=None):
        self = super().__new__(cls, name)
        self.zero, self.dtype, self.cuda, self.rank = zero, dtype, cuda, rank
        self._differentiable = differentiable
        self.element = element      # a loop stack's entry type (None: not a stack)
        return self

    @property
    def adjoint(self):
        """The type of this type's adjoints and tangents, or None (no derivative)."""
        return self if self._differentiable else None

    @property
    def differentiable(self):
        return self._differentiable

    def float32(self):
        """This type in a float32 kernel (floats are float32, the rest unchanged)."""
        return FLOAT32 if self == "float" else self

    def __reduce__(self):           # (pickles, deep copies: the one object per name)
        return (of, (str(self),))


BOOL = ValueType("bool", False, "bool", "int8", 0, False)
INT = ValueType("int", 0, "int64", "int64", 1, False)
FLOAT = ValueType("float", 0.0, "float64", "float64", 2, True)
FLOAT32 = ValueType("float32", 0.0, "float32", "float32", 2, True)

# Loop stacks as values (a generated backward printed as user code keeps its stacks in
# locals, see emit/user.py): a stack of floats is differentiable, its tangent a stack of
# their tangents. A stack has no constant zero: a declared one is a new, empty stack.
STACKS = {e: ValueType(f"{e}_stack", None, None, None, 3, e.differentiable, element=e)
          for e in (BOOL, INT, FLOAT)}

TYPES = {t: t for t in (BOOL, INT, FLOAT, FLOAT32, *STACKS.values())}


def stack_of(element):
    """The type of a loop stack of ``element`` values."""
    return STACKS[of(element)]


def of(kind):
    """The ``ValueType`` named ``kind`` (a name or a type; None stays None)."""
    if kind is None:
        return None
    try:
        return TYPES[kind]
    except KeyError:
        raise ValueError(f"no value type named {kind!r}") from None


def join(*kinds):
    """Least upper bound: bool < int < float (None is unknown)."""
    known = [of(k) for k in kinds if k is not None]
    if not known:
        return None
    return max(known, key=lambda t: t.rank)
