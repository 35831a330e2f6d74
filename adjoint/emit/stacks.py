"""How each target prints the loop-stack nodes of the IR (derive/ir.py).

- a code with growable stacks (CPU): ``StackNew`` is
  ``rt.stack_new_<kind>(capacity, first)``, a growable array; ``StackPush`` is
  ``rt.stack_push(stack, index, value)``, which returns the stack, grown when full;
  ``StackRead`` is ``stack[index]``.
- a code with fixed stacks (CUDA: its ``local_array``, runtime/targets.py): a thread's
  stack is ``cuda.local.array(capacity, <dtype>)``, whose capacity is fixed at compile
  time. emit/cuda.py lowers pushes (a store behind a capacity test that reports an
  overflow) and reads (clamped to the array) first and gives each ``StackNew`` its
  constant capacity; ``spell`` prints what is left.

Expects: function bodies as emitted, after emit/cuda.py and the float32 pass
(which turns a float stack's kind into "float32"). Guarantees: new statements
with no stack node left; no other node changes.
"""
import gast

from ..rules.types import of
from ..derive.ir import copy_tree, name, rt_call
from .targets import code


def spell(body, target):
    """``body`` with its stack nodes printed for ``target`` ("cpu" or "cuda")."""
    return [_Spell(code(target)).visit(copy_tree(s)) for s in body]


def dotted(path):
    """The expression ``a.b.c`` for the text "a.b.c" (a code's spelling)."""
    base, *attrs = path.split(".")
    node = name(base)
    for a in attrs:
        node = gast.Attribute(value=node, attr=a, ctx=gast.Load())
    return node


class _Spell(gast.NodeTransformer):
    def __init__(self, code):
        self.code = code

    def visit_StackNew(self, node):
        self.generic_visit(node)
        if self.code.fixed_stacks:
            return gast.Call(func=dotted(self.code.local_array),
                             args=[node.capacity, name(of(node.kind).cuda)], keywords=[])
        return rt_call(f"stack_new_{node.kind}", node.capacity, node.first)

    def visit_StackPush(self, node):
        self.generic_visit(node)
        if self.code.fixed_stacks:
            raise ValueError(f"a {self.code.name} stack push is lowered before printing "
                             "(emit/cuda.py)")
        return rt_call("stack_push", node.stack, node.index, node.value)

    def visit_StackRead(self, node):
        self.generic_visit(node)
        return gast.Subscript(value=node.stack, slice=node.index, ctx=gast.Load())

