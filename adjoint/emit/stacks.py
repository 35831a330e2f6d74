"""How each target prints the loop-stack nodes of the IR (transform/ir.py).

- CPU: ``StackNew`` is ``rt.stack_new_<kind>(capacity, first)``, a growable
  array; ``StackPush`` is ``rt.stack_push(stack, index, value)``, which returns
  the stack, grown when full; ``StackRead`` is ``stack[index]``.
- CUDA: a thread's stack is ``cuda.local.array(capacity, <dtype>)``, whose
  capacity is fixed at compile time. emit/cuda.py lowers pushes (a store behind
  a capacity test that reports an overflow) and reads (clamped to the array)
  first and gives each ``StackNew`` its constant capacity; ``spell`` prints what
  is left.

Expects: function bodies as emitted, after emit/cuda.py and the float32 pass
(which turns a float stack's kind into "float32"). Guarantees: new statements
with no stack node left; no other node changes.
"""
import gast

from ..rules.types import of
from ..transform.ir import copy_tree, name, rt_call


def spell(body, target):
    """``body`` with its stack nodes printed for ``target`` ("cpu" or "cuda")."""
    return [_Spell(target).visit(copy_tree(s)) for s in body]


class _Spell(gast.NodeTransformer):
    def __init__(self, target):
        self.target = target

    def visit_StackNew(self, node):
        self.generic_visit(node)
        if self.target == "cuda":
            local = gast.Attribute(value=gast.Attribute(value=name("cuda"), attr="local",
                                                        ctx=gast.Load()),
                                   attr="array", ctx=gast.Load())
            return gast.Call(func=local, args=[node.capacity, name(of(node.kind).cuda)],
                             keywords=[])
        return rt_call(f"stack_new_{node.kind}", node.capacity, node.first)

    def visit_StackPush(self, node):
        self.generic_visit(node)
        if self.target == "cuda":
            raise ValueError("emit/cuda.py lowers a CUDA stack push before printing")
        return rt_call("stack_push", node.stack, node.index, node.value)

    def visit_StackRead(self, node):
        self.generic_visit(node)
        return gast.Subscript(value=node.stack, slice=node.index, ctx=gast.Load())

