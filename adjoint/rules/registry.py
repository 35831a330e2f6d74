"""The rule registry and template instantiation.

A rule is written as a Python function ``def name(z, x, y): ...`` whose body
updates ``adj_x``/``adj_y`` from ``adj_z`` (``z`` is the result). The body is
parsed once into a gast template; ``instantiate`` substitutes the real names,
drops the statements that update an operand with no adjoint (a constant, an
integer, an inactive value) and returns fresh statements. Every rule also says
how the primal is written in generated code, the kind of its result and the
range its table-driven test samples.
"""
import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass

import gast

RULES = {}

KIND_ORDER = {"bool": 0, "int": 1, "float": 2}


def join(*kinds):
    """Least upper bound of kinds: bool < int < float (None is unknown)."""
    known = [k for k in kinds if k is not None]
    if not known:
        return None
    return max(known, key=KIND_ORDER.get)


def numeric(*kinds):
    k = join(*kinds)
    return "int" if k == "bool" else k


@dataclass
class Rule:
    """One operation: its primal spelling, its adjoint template and its test domain."""
    key: str                 # registry key: gast operator class name or canonical call name
    symbol: str              # how the primal is written: '*' or 'math.sin'
    params: tuple            # operand names used in the template
    template: list           # gast statements of the adjoint (empty: zero derivative)
    result_kind: object      # callable(*operand kinds) -> kind
    domain: tuple            # per operand (lo, hi) sampled by the rule tests
    differentiable: bool

    def callee_expr(self):
        """gast expression calling this op (for call-style rules)."""
        return gast.parse(self.symbol, mode="eval").body

    def instantiate(self, z, args, adj_of):
        """Adjoint statements for ``z = op(args)``.

        ``z``: result name; ``args``: operand atoms (gast Name/Constant);
        ``adj_of(atom)``: the adjoint variable name of an operand, or None when
        it has none (constants, integers, inactive values).
        """
        mapping, dropped = {"z": ("value", gast.Name(id=z, ctx=gast.Load(), annotation=None,
                                                       type_comment=None)),
                            "adj_z": ("name", adj_of(z))}, set()
        for p, a in zip(self.params, args):
            mapping[p] = ("value", a)
            adj = adj_of(a)
            if adj is None:
                dropped.add("adj_" + p)
            else:
                mapping["adj_" + p] = ("name", adj)
        return [_Substitute(mapping).visit(s) for s in _without(self.template, dropped)]


def _without(stmts, dropped):
    """Copies of ``stmts`` less every update of a dropped adjoint, inside branches too
    (a branch left empty goes; an ``if`` whose body is left empty tests the negation),
    so a rule may follow its primal's branch structure exactly."""
    out = []
    for s in stmts:
        if isinstance(s, gast.AugAssign) and s.target.id in dropped:
            continue
        if isinstance(s, gast.If):
            body, orelse = _without(s.body, dropped), _without(s.orelse, dropped)
            if not body and not orelse:
                continue
            test = copy.deepcopy(s.test)
            if not body:
                body, orelse = orelse, []
                test = gast.UnaryOp(op=gast.Not(), operand=test)
            out.append(gast.If(test=test, body=body, orelse=orelse))
            continue
        out.append(copy.deepcopy(s))
    return out


class _Substitute(gast.NodeTransformer):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Name(self, node):
        if node.id not in self.mapping:
            return node
        how, what = self.mapping[node.id]
        if how == "name":
            return gast.Name(id=what, ctx=node.ctx, annotation=None, type_comment=None)
        return copy.deepcopy(what)


def _template(fn):
    tree = gast.parse(textwrap.dedent(inspect.getsource(fn)))
    fdef = tree.body[0]
    params = tuple(a.id for a in fdef.args.args)[1:]
    body = [s for s in fdef.body if not (isinstance(s, gast.Expr) and isinstance(s.value, gast.Constant))]
    if len(body) == 1 and isinstance(body[0], gast.Pass):
        body = []
    return params, body


def rule(key, symbol, domain, result_kind=numeric, differentiable=True):
    """Register the decorated template function as the rule for ``key``."""
    def deco(fn):
        params, body = _template(fn)
        if key in RULES:
            raise ValueError(f"duplicate adjoint rule for {key}")
        RULES[key] = Rule(key, symbol, params, body, result_kind, tuple(domain), differentiable)
        return fn
    return deco


def lookup(key):
    return RULES.get(key)


def unparse(stmts):
    """Source of gast statements (used by tests and docs)."""
    return "\n".join(ast.unparse(gast.gast_to_ast(s)) for s in stmts)
