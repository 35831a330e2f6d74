"""The rule table and its two instantiations, reverse (VJP) and forward (JVP).

A rule is written once, as a Python function ``def name(z, x, y): ...`` whose
body states each operand's partial derivative as a *linear map of a seed*
``g``: ``d_x = g * y`` says ``dz/dx = y``. Statements may sit in ``if``
branches that follow the primal's own branches (``abs``, ``min``, ``clamp``),
so ties and NaN send the derivative where the value came from. ``z`` is the
result. The body is parsed once into a gast template, and

- reverse mode (``Rule.reverse``) is the transpose: ``d_x = e`` becomes
  ``adj_x += e[g := adj_z]`` (``adj_x -= e'`` when ``e`` is ``-e'``);
- forward mode (``Rule.forward``) is the JVP: ``dot_z`` is the sum over the
  operands of ``e[g := dot_x]``, terms over one denominator summed before it
  divides once (``(dot_x - dot_y * z) / y`` for ``/``).

Statements of an operand with no derivative (a constant, an integer, an
inactive value) are dropped, inside branches too. Every rule also says how the
user writes the primal (``symbol``, and for a call any ``aliases``: ``math.fabs`` is
``abs``), the runtime function generated code calls
instead where Python's own operation raises rather than follow IEEE arithmetic
(``runtime``: ``x / y`` is ``rt.div(x, y)``, ``math.sin(x)`` is ``rt.sin(x)``;
see adjoint/runtime/ieee.py), the kind of its result and the range its
table-driven test samples. Templates call math functions as user code does
(``math.cos(x)``) and get the same spelling (``rt.cos(x)``).
"""
import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass

from ..derive.ir import BlockRewriter
from .types import BOOL, INT, join

import gast

RULES = {}

def numeric(*kinds):
    k = join(*kinds)
    return INT if k == BOOL else k


SEED = "g"          # the seed of a partial: adj_z (reverse) or the operand's dot_ (forward)


@dataclass
class Rule:
    """One operation: its primal spelling, its partials template and its test domain."""
    key: str                 # registry key: gast operator class name or canonical call name
    symbol: str              # how the user writes the primal: '*' or 'math.sin'
    params: tuple            # operand names used in the template
    template: list           # gast statements ``d_<param> = <linear in g>`` (empty: zero)
    result_kind: object      # callable(*operand kinds) -> kind
    domain: tuple            # per operand (lo, hi) sampled by the rule tests
    differentiable: bool
    runtime: str = None      # generated code calls rt.<runtime> (None: written as symbol)
    aliases: tuple = ()      # other callables meaning the same: 'math.fabs' for abs
    # every result z is 0, +-inf, nan or a number whose reciprocal 1 / z is a normal
    # number (sqrt: never subnormal), so X / z and X * (1 / z) differ by rounding only
    # (pass reciprocal)
    safe_reciprocal: bool = False
    # its operands are ints or bools (bit operations): a float operand is an error at the
    # user's line (pass types)
    integer: bool = False

    @property
    def is_call(self):
        """Whether users write the operation as a call (``math.sin(x)``, ``abs(x)``), not
        an operator: an operator's key is its gast class's name (``Add``, ``Not``)."""
        return not isinstance(getattr(gast, self.key, None), type)

    @property
    def spellings(self):
        """The dotted names of every Python callable a kernel may call for this rule
        (``math.sin``, ``abs``, ``math.fabs``, ``ad.clamp``; ``ad.sin`` is ``math.sin``);
        for an operator its aliases only (``ad.bit_and`` for ``&``). The frontend resolves
        them (frontend/parse.py)."""
        return ((self.symbol,) if self.is_call else ()) + self.aliases

    @property
    def partials(self):
        """The operands whose partial the template states (``d_<operand> = ...``, in any
        branch); another operand's derivative is zero (``copysign``'s sign operand)."""
        return tuple(p for p in self.params if any(
            _partial_of(s) == p for s in gast.walk(gast.Module(body=self.template,
                                                                type_ignores=[]))))

    def callee_expr(self):
        """gast expression of the function generated code calls (call-style rules):
        ``rt.sin`` for ``math.sin``, ``abs`` for ``abs``."""
        text = f"rt.{self.runtime}" if self.runtime else self.symbol
        return gast.parse(text, mode="eval").body

    def _mapping(self, z, args):
        mapping = {"z": ("value", _name(z))}
        for p, a in zip(self.params, args):
            mapping[p] = ("value", a)
        return mapping

    def reverse(self, z, args, adj_of):
        """Adjoint statements for ``z = op(args)``: ``adj_x += dz/dx * adj_z`` per operand.

        ``z``: result name; ``args``: operand atoms (gast Name/Constant);
        ``adj_of(atom)``: the adjoint variable name of an operand, or None when
        it has none (constants, integers, inactive values).
        """
        adjs = {p: adj_of(a) for p, a in zip(self.params, args)}
        mapping = self._mapping(z, args)
        mapping[SEED] = ("name", adj_of(z))

        def update(p, expr):
            sign, term = _signed(expr)
            return gast.AugAssign(target=_name(adjs[p], store=True),
                                  op=gast.Sub() if sign < 0 else gast.Add(), value=term)
        kept = _without(self.template, _no_derivative(adjs))
        body = _guarded_quotients(_MapPartials(update).block(kept))
        return [_Substitute(mapping).visit(s) for s in body]

    def forward(self, z, args, dot_of, dot_z):
        """Tangent statements for ``z = op(args)``: ``dot_z = sum of dz/dx * dot_x``.

        ``dot_of(atom)``: the tangent variable name of an operand, or None when it
        has none; ``dot_z``: the name the result's tangent is assigned to.
        """
        dots = {p: dot_of(a) for p, a in zip(self.params, args)}
        mapping = self._mapping(z, args)
        kept = _without(self.template, _no_derivative(dots))

        def seeded(p, expr):
            return _Substitute({SEED: ("name", dots[p])}).visit(copy.deepcopy(expr))
        if all(_partial_of(s) for s in kept):
            terms = [_signed(seeded(_partial_of(s), s.value)) for s in kept]
            body = [_assign(dot_z, _sum(terms) if terms else _const(0.0))]
        else:
            body = _tangent_updates(kept, seeded, dot_z, first=True)
        return [_Substitute(mapping).visit(s) for s in body]


def _name(id_, store=False):
    return gast.Name(id=id_, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


def _const(value):
    return gast.Constant(value=value, kind=None)


def _assign(target, value):
    return gast.Assign(targets=[_name(target, store=True)], value=value, type_comment=None)


def _partial_of(s):
    """The operand ``x`` a template statement ``d_x = ...`` states the partial of, or None."""
    if isinstance(s, gast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], gast.Name) and s.targets[0].id.startswith("d_"):
        return s.targets[0].id[2:]
    return None


def _signed(expr):
    """(sign, term) with ``expr == sign * term``: a partial written ``-(e)`` is (-1, e)."""
    if isinstance(expr, gast.UnaryOp) and isinstance(expr.op, gast.USub):
        return -1, expr.operand
    return 1, expr


def _tangent_updates(stmts, seeded, dot_z, first=False):
    """The JVP of a template with branches: ``dot_z = ...`` for a leading partial (``first``;
    ``dot_z = 0.0`` when the template starts with a branch), then ``dot_z += ...`` /
    ``dot_z -= ...`` per partial, inside the template's branches. Consecutive partials
    of one block over one denominator (``ad.length3``'s ``g / z * x``, ``g / z * y``, ...)
    are one update, their sum dividing once (``_sum``)."""
    out = []
    if first and not _partial_of(stmts[0]):
        out.append(_assign(dot_z, _const(0.0)))
    k = 0
    while k < len(stmts):
        s = stmts[k]
        if isinstance(s, gast.If):
            out.append(gast.If(test=s.test, body=_tangent_updates(s.body, seeded, dot_z),
                               orelse=_tangent_updates(s.orelse, seeded, dot_z)))
            k += 1
            continue
        run = [s]
        while k + len(run) < len(stmts) and _partial_of(stmts[k + len(run)]):
            run.append(stmts[k + len(run)])
        terms = [_signed(seeded(_partial_of(r), r.value)) for r in run]
        if len(terms) > 1 and _shared_denominator(terms) is None:
            run, terms = run[:1], terms[:1]         # each partial its own update
        k += len(run)
        total = _sum(terms)
        if first and not out:
            out.append(_assign(dot_z, total))
            continue
        sign, term = _signed(total)
        out.append(gast.AugAssign(target=_name(dot_z, store=True),
                                  op=gast.Sub() if sign < 0 else gast.Add(), value=term))
    return out


def _over(term):
    """``(numerator, d)`` of a term ``a / d`` (``a``) or ``a / d * c`` (``a * c``), else None."""
    if isinstance(term, gast.BinOp) and isinstance(term.op, gast.Div):
        return term.left, term.right
    if isinstance(term, gast.BinOp) and isinstance(term.op, gast.Mult) and \
            isinstance(term.left, gast.BinOp) and isinstance(term.left.op, gast.Div):
        return gast.BinOp(left=term.left.left, op=gast.Mult(), right=term.right), \
            term.left.right
    return None


def _shared_denominator(terms):
    """The one denominator ``d`` every term is over (``_over``), or None."""
    overs = [_over(t) for _, t in terms]
    if None in overs or len({ast.dump(gast.gast_to_ast(copy.deepcopy(d)))
                             for _, d in overs}) != 1:
        return None
    return overs[0][1]


def _sum(terms):
    """The expression ``sum(sign * term)``; terms over one denominator (``a / d``,
    ``b / d * c``: the partials of ``/``, ``atan2``, ``ad.length3``) share one division,
    ``(a - b * c) / d``: a JVP divides once where its operands' terms would divide each."""
    d = _shared_denominator(terms) if len(terms) > 1 else None
    if d is not None:
        return gast.BinOp(left=_sum([(sign, _over(t)[0]) for sign, t in terms]),
                          op=gast.Div(), right=d)
    total = None
    for sign, term in terms:
        if total is None:
            total = term if sign > 0 else gast.UnaryOp(op=gast.USub(), operand=term)
        else:
            total = gast.BinOp(left=total, op=gast.Sub() if sign < 0 else gast.Add(), right=term)
    return total


def _no_derivative(derivs):
    return {p for p, d in derivs.items() if d is None}


class _MapPartials(BlockRewriter):
    """``block(stmts)``: ``stmts`` with every ``d_x = e`` replaced by ``fn(x, e)`` (inside
    branches too; the branches are copies)."""
    copy = True

    def __init__(self, fn):
        self.fn = fn

    def stmt(self, s):
        p = _partial_of(s)
        return [self.fn(p, s.value)] if p else self.nested(s)


def _guarded_quotients(stmts):
    """``stmts`` with each ``if test:`` (no ``else``) around updates ``adj_x += a / d * x``
    over one denominator (``ad.length3``'s partials, stated 0 at the origin) as the updates
    ``adj_x += (a / d if test else 0.0) * x``: one select of the quotient, which LLVM
    computes once, where the branch became a select per update (springs' vec3 backward
    took 12% longer than its scalar twin). A partial whose factor ``x`` is nan where the
    test fails is then nan (``0.0 * nan``), not left out."""
    out = []
    for s in stmts:
        body = s.body if isinstance(s, gast.If) and not s.orelse else ()
        if not body or not all(_quotient_times(b) for b in body) or \
                _shared_denominator([(1, b.value) for b in body]) is None:
            out.append(s)
            continue
        for b in s.body:        # b.value: (a / d) * x
            quotient = gast.IfExp(test=copy.deepcopy(s.test), body=b.value.left,
                                  orelse=_const(0.0))
            out.append(gast.AugAssign(target=b.target, op=b.op, value=gast.BinOp(
                left=quotient, op=gast.Mult(), right=b.value.right)))
    return out


def _quotient_times(s):
    """Whether ``s`` is an update ``adj_x += (a / d) * x`` (or ``-=``)."""
    v = getattr(s, "value", None)
    return isinstance(s, gast.AugAssign) and isinstance(v, gast.BinOp) and \
        isinstance(v.op, gast.Mult) and isinstance(v.left, gast.BinOp) and \
        isinstance(v.left.op, gast.Div)


def _without(stmts, dropped):
    """Copies of ``stmts`` less every partial of a dropped operand, inside branches too
    (a branch left empty goes; an ``if`` whose body is left empty tests the negation),
    so a rule may follow its primal's branch structure exactly."""
    out = []
    for s in stmts:
        if _partial_of(s) in dropped:
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

    def visit_Attribute(self, node):
        # math.cos(x) in a template: spelled as the user's math.cos(x) is (rt.cos)
        if isinstance(node.value, gast.Name) and node.value.id == "math":
            rule = RULES.get(node.attr)
            if rule is None:
                raise ValueError(f"a rule template calls math.{node.attr}, which has no rule")
            return rule.callee_expr()
        return self.generic_visit(node)

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
    for s in gast.walk(gast.Module(body=body, type_ignores=[])):
        if isinstance(s, gast.stmt) and not isinstance(s, gast.If) and (
                _partial_of(s) not in params):
            raise ValueError(f"rule {fn.__name__}: a template states partials only, as "
                             f"'d_<operand> = <expression linear in {SEED}>'")
    return params, body


def rule(key, symbol, domain, result_kind=numeric, differentiable=True, runtime=None,
         aliases=(), safe_reciprocal=False, integer=False):
    """Register the decorated partials template as the rule for ``key``.

    ``runtime``: the name of the ``rt.<name>`` function generated code calls (a runtime
    builtin of adjoint/runtime/ieee.py); ``aliases``: other Python callables a kernel
    may call for it, spelled as ``symbol`` is (``math.fabs``, ``pow``);
    ``safe_reciprocal``: see ``Rule.safe_reciprocal``; ``integer``: its operands are ints
    (``Rule.integer``)."""
    def deco(fn):
        params, body = _template(fn)
        if key in RULES:
            raise ValueError(f"duplicate adjoint rule for {key}")
        RULES[key] = Rule(key, symbol, params, body, result_kind, tuple(domain), differentiable,
                          runtime, tuple(aliases), safe_reciprocal, integer)
        return fn
    return deco


def lookup(key):
    return RULES.get(key)


def unparse(stmts):
    """Source of gast statements (used by tests and docs)."""
    module = ast.fix_missing_locations(gast.gast_to_ast(gast.Module(body=list(stmts),
                                                                    type_ignores=[])))
    return ast.unparse(module)
