"""Warp's call forms that are other Python constructs, rewritten as pass parse resolves them.

* ``wp.where(cond, a, b)`` is the ternary ``a if cond else b``, and Warp's older
  ``wp.select(cond, b, a)`` (false first) the same ternary: so a kernel's choice has one
  form and one derivative, the ternary's (pass normalize desugars it to a branch);
* the statement ``wp.quat_to_axis_angle(q, axis, angle)``, whose last two arguments Warp
  writes into, is the assignment ``axis, angle = wp.quat_to_axis_angle(q)`` of the form
  that returns both (frontend/vecrot.py).

Expects gast nodes not yet resolved; returns new nodes for the resolver to visit.
"""
import gast

# the kernel builtins whose results Warp also writes into out-arguments: name -> how many
OUT_ARGUMENTS = {"quat_to_axis_angle": 2}


def ternary(node, which, error):
    """``where``/``select`` call ``node`` as a ``gast.IfExp``; ``error(message, node)``
    makes the error for a call of another shape."""
    if len(node.args) != 3 or node.keywords:
        order = "value_if_true, value_if_false" if which == "where" else \
            "value_if_false, value_if_true"
        raise error(f"{which}() takes three arguments, (cond, {order})", node)
    cond, first, second = node.args
    body, orelse = (first, second) if which == "where" else (second, first)
    return gast.copy_location(gast.IfExp(test=cond, body=body, orelse=orelse), node)


def out_arguments(stmt, name, error):
    """The statement call ``stmt`` (an ``Expr``) of builtin ``name``, which writes its last
    arguments, as an assignment of its results to them."""
    call, count = stmt.value, OUT_ARGUMENTS[name]
    outs = call.args[len(call.args) - count:]
    if not all(isinstance(a, gast.Name) for a in outs) or call.keywords:
        raise error(f"{name}(...) writes its last {count} arguments: give local variables "
                    f"there, or write the form that returns them: a, b = {name}(...)", call)
    targets = gast.Tuple(elts=[gast.Name(id=a.id, ctx=gast.Store(), annotation=None,
                                         type_comment=None) for a in outs], ctx=gast.Store())
    value = gast.Call(func=call.func, args=call.args[:len(call.args) - count], keywords=[])
    for n in [targets, value] + targets.elts:
        gast.copy_location(n, call)
    return gast.copy_location(gast.Assign(targets=[targets], value=value, type_comment=None),
                              stmt)
