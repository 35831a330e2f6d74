"""Reverse mode as the transpose of forward mode, line by line (issue 42 part 2).

``ad.transpose_view(f, *args)`` (a kernel: ``ad.transpose_view(kernel, dim, inputs=,
outputs=, thread=i)``) shows the *linearized program* of one evaluation -- the JVP with
the primal values fixed, so each tangent line is a linear combination
``dot_z = c1 * dot_x + c2 * dot_y`` -- next to its *transpose*, one
``adj_x += c1 * adj_z`` per term, which reverse mode runs bottom up.

Both columns come from the rule table (adjoint/rules): each statement ``z = op(x, y)``
of the SSA form is instantiated by ``Rule.forward`` (the JVP line) and ``Rule.reverse``
(the backward's lines), as the real JVP and backward are; the numbers are those
templates evaluated at the primal values with one tangent (or the seed) set to 1. The
primal values come from the evaluation trace (adjoint/derivatives/traces.py) of the plain generated
forward, so loops appear unrolled, as they ran (elided past ``max_iterations``). A copy
``z = a`` is ``dot_z = dot_a`` / ``adj_a += adj_z``; an element load ``z = x[i]`` is
``adj_x[i] += adj_z``, a store ``y[i] = v`` is ``adj_v += adj_y[i]; adj_y[i] = 0``.
A call of a func (one value) is one statement whose coefficients ``D<k>(f)`` are the
callee's partials, computed by its own JVP (``ad.jvp``) and backward (``ad.grad``).
A value assigned more than once (a loop's values) has its adjoint zeroed once its
assignment is transposed, as the backward does.
"""
from dataclasses import dataclass, field, replace
import re

import gast

from ..build import passes
from ..api import Func, Kernel
from . import funcs
from ..emit.printer import expr_src
from ..rules import lookup
from ..rules.registry import unparse
from ..runtime import backend, backend_scope
from .traces import Elided, elide, evaluation_trace, show_value
from ..derive.ir import name, operation


@dataclass(frozen=True)
class Step:
    """One statement of the SSA form and its linear forms, as the rule table writes them."""
    kind: str               # 'op', 'call', 'copy', 'load', 'store', 'accumulate', 'return'
    target: str             # the value assigned: a name, 'y[i]' for an element
    statement: str          # the primal statement
    operands: tuple         # the expressions whose tangents the JVP line reads
    jvp: str                # its JVP statement(s) (Rule.forward), symbolic
    transpose: str          # its backward statement(s) (Rule.reverse), symbolic
    node: object = None     # the gast statement
    rule: object = None     # for 'op': the Rule
    active: tuple = ()      # for 'op', 'call': positions of the operands with a tangent
    zeroed: bool = False    # its value is assigned more than once: adj_z = 0 after it


@dataclass(frozen=True)
class Term:
    """``target += coefficient * source`` (a transposed line) or a term of a JVP line."""
    target: str             # adj_x (symbolic)
    coefficient: float
    source: str             # adj_z (symbolic)
    shown_target: str       # with indices as numbers: adj_x[2]
    shown_source: str


@dataclass(frozen=True)
class Entry:
    """One executed statement: its step, the coefficients at the primal point."""
    phase: str              # 'transpose' (for traces.elide)
    step: Step
    value: object           # the primal value it assigned
    dot: str                # the tangent it assigns, shown: dot_y[2]
    jvp_terms: tuple        # (coefficient, dot operand shown) per tangent it reads
    terms: tuple            # Term per transposed line, in the backward's order
    zero: str               # the adjoint zeroed after it ('' for none), shown
    file: str
    line: int
    source: str
    loops: tuple = ()


@dataclass(frozen=True)
class Update:
    """One line of the transposed program as it runs: the adjoint it changes, after."""
    shown: str              # adj_x, adj_y[2]
    target: str             # symbolic: adj_x, adj_y[i] ('' for a line setting it to 0)
    value: float            # its value after the line
    statement: str          # the line, with numbers: adj_x += 0.5 * adj_t1
    file: str
    line: int
    loops: tuple = ()
    phase: str = "adjoint"  # (for traces.elide)


@dataclass
class Transposition:
    """The linearized program of one evaluation next to its transpose; ``str()`` is a
    terminal listing, ``markdown()`` a table; ``adjoints`` the transposed program run
    bottom up: an ``Update`` per line."""
    name: str
    title: str
    entries: list = field(default_factory=list)
    adjoints: list = field(default_factory=list)
    seeds: dict = field(default_factory=dict)
    max_iterations: int = 3
    arguments: dict = field(default_factory=dict)   # the parameters' values (numbers)

    def rows(self):
        """[(where, source, primal, JVP symbolic, linear, transposed, backward symbolic)]."""
        out = []
        for e in elide(self.entries, self.max_iterations):
            if isinstance(e, Elided):
                out.append((f"{e.file}:{e.line}", "", "…", "", f"… {e.count} statements of "
                            f"iterations {e.first + 1} to {e.last + 1} elided …", "", ""))
                continue
            s = e.step
            linear = f"{e.dot} = " + _combination(e.jvp_terms)
            moved = "; ".join(f"{t.shown_target} += {_coef(t.coefficient)}{t.shown_source}"
                              for t in e.terms)
            if e.zero:
                moved = "; ".join(x for x in (moved, f"{e.zero} = 0") if x)
            primal = f"{s.statement}  [{show_value(e.value, 6)}]" if s.kind != "return" \
                else s.statement
            out.append((f"{e.file}:{e.line}" if e.line else "", e.source, primal,
                        s.jvp, linear, moved, s.transpose))
        return out

    def __str__(self):
        return self.text()

    def text(self):
        lines = [self.title,
                 "# left: the JVP line with the primal values fixed (read down: forward mode)",
                 "# right: its transpose, one adj_ line per term (read up: reverse mode)"]
        rows = self.rows()
        width = max([len(r[4]) for r in rows] + [len(r[3]) + 6 for r in rows] + [20])
        last = None
        for where, src, primal, jvp, linear, moved, back in rows:
            if (where, src) != last and src:
                lines.append(f"── {where}: {src}")
            last = (where, src)
            lines.append(f"   {primal}")
            if jvp:
                lines.append(f"     {'rule: ' + jvp.replace(chr(10), '; '):<{width + 6}}"
                             f" │ rule: {back.replace(chr(10), '; ')}")
            lines.append(f"           {linear:<{width}} │       {moved}")
        lines.append("# the transpose run bottom up, seeded with "
                     + ", ".join(f"{k} = {show_value(v, 6)}" for k, v in self.seeds.items()))
        for u in elide(self.adjoints, self.max_iterations):
            if isinstance(u, Elided):
                lines.append(f"   … {u.count} lines of iterations {u.first + 1} to "
                             f"{u.last + 1} elided …")
            else:
                lines.append(f"   {u.statement:<{width + 8}} {u.shown} = "
                             f"{show_value(u.value, 6)}")
        return "\n".join(lines) + "\n"

    def markdown(self):
        def cell(s):
            return f"`{s}`".replace("|", "\\|").replace("\n", "`<br>`") if s else ""
        out = ["| user line | primal [value] | JVP (rule) | JVP at the primal point "
               "| transpose at the primal point | backward (rule) |",
               "| --- | --- | --- | --- | --- | --- |"]
        last = None
        for where, src, primal, jvp, linear, moved, back in self.rows():
            user = "" if (where, src) == last else f"{where}: {src}" if src else where
            last = (where, src)
            out.append("| " + " | ".join([cell(user), cell(primal), cell(jvp), cell(linear),
                                          cell(moved).replace("; ", "`<br>`"), cell(back)])
                       + " |")
        return "\n".join(out) + "\n"

    def value(self, adjoint):
        """The value ``adjoint`` (shown, as ``adj_x`` or ``adj_x[2]``) ends with."""
        for u in reversed(self.adjoints):
            if u.shown == adjoint:
                return u.value
        return self.seeds.get(adjoint, 0.0)


def _coef(c):
    return f"{show_value(c, 6)} * "


def _combination(terms):
    if not terms:
        return "0"
    return " + ".join(f"{_coef(c)}{d}" for c, d in terms).replace("+ -", "- ")


def steps(tr):
    """{target: [Step]} for the SSA form of a transformed kernel or func ``tr``."""
    active = tr.active
    arrays = {p.name for p in tr.pf.differentiable() if p.is_array}
    found, looped = {}, set()
    depth = [0]

    def add(s, kind, target, operands, jvp, transpose, **kw):
        found.setdefault(target, []).append(Step(kind, target, expr_src(s), tuple(operands),
                                                 jvp, transpose, s, **kw))
        if depth[0]:
            looped.add(target)

    def has(a):
        return isinstance(a, gast.Name) and a.id in active

    def visit(body):
        for s in body:
            if isinstance(s, gast.If):
                visit(s.body)
                visit(s.orelse)
            elif isinstance(s, (gast.For, gast.While)):
                depth[0] += 1
                info = getattr(s, "loop", None)
                visit(list(s.body) + (list(info.latch) + list(info.cond) if info else []))
                depth[0] -= 1
            elif isinstance(s, gast.Return):
                vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
                seeds = ["adj_ret"] if len(vals) == 1 else [f"adj_ret{k}" for k in range(len(vals))]
                add(s, "return", "return", [v for v in vals if has(v)], "",
                    "\n".join(f"adj_{v.id} += {g}" for v, g in zip(vals, seeds) if has(v)))
            elif isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Subscript):
                arr, v = s.target.value.id, s.value
                if arr in arrays and has(v):
                    t = expr_src(s.target)
                    add(s, "accumulate", t, [v], f"dot_{t} += dot_{v.id}",
                        f"adj_{v.id} += adj_{t}")
            elif isinstance(s, gast.Assign):
                assign(s, s.targets[0], s.value)

    def assign(s, t, v):
        if isinstance(t, gast.Subscript):
            if t.value.id in arrays:
                e = expr_src(t)
                add(s, "store", e, [v] if has(v) else [], f"dot_{e} = " +
                    (f"dot_{v.id}" if has(v) else "0.0"),
                    (f"adj_{v.id} += adj_{e}\n" if has(v) else "") + f"adj_{e} = 0.0")
            return
        call = isinstance(v, gast.Call) and getattr(v, "callee", None) is not None \
            and v.callee.kind == "func"
        if call and isinstance(t, gast.Tuple) and any(has(e) for e in t.elts):
            raise tr.pf.error(f"the transpose view takes a call of a func returning one "
                              f"value ('{v.callee.name}' returns several)", s,
                              stage="transpose")
        if not isinstance(t, gast.Name) or t.id not in active:
            return
        z = t.id
        if call:        # one statement: the callee's partials D<k>, from its own derivatives
            act = tuple(k for k, a in enumerate(v.args) if has(a))
            f = v.callee.name
            add(s, "call", z, [v.args[k] for k in act], f"dot_{z} = " + " + ".join(
                f"D{k}({f}) * dot_{v.args[k].id}" for k in act), "\n".join(
                f"adj_{v.args[k].id} += D{k}({f}) * adj_{z}" for k in act), active=act)
            return
        if isinstance(v, gast.Name) or isinstance(v, gast.Constant):
            add(s, "copy", z, [v] if has(v) else [],
                f"dot_{z} = " + (f"dot_{v.id}" if has(v) else "0.0"),
                f"adj_{v.id} += adj_{z}" if has(v) else "")
        elif isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name) \
                and v.value.id in arrays:
            e = expr_src(v)
            add(s, "load", z, [v], f"dot_{z} = dot_{e}", f"adj_{e} += adj_{z}")
        elif isinstance(v, (gast.BinOp, gast.UnaryOp, gast.Call)) and not (
                isinstance(v, gast.Call) and getattr(v, "callee", None) is not None
                and v.callee.kind == "func"):
            key, args = operation(v)
            rule = lookup(key)
            if rule is None:
                raise tr.pf.error(f"no derivative rule for '{key}'", s, stage="transpose")
            dot = {a.id: f"dot_{a.id}" for a in args if has(a)}
            jvp = unparse(rule.forward(z, args, lambda a: dot.get(getattr(a, "id", None)),
                                       f"dot_{z}"))
            back = unparse(rule.reverse(z, args, lambda a: f"adj_{a}" if isinstance(a, str)
                                        else f"adj_{a.id}" if has(a) else None))
            act = tuple(k for k, a in enumerate(args) if has(a))
            add(s, "op", z, [args[k] for k in act], jvp, back, rule=rule, active=act)
        else:
            raise tr.pf.error("the transpose view has no linear form for this statement "
                              f"({type(v).__name__})", s, stage="transpose")

    visit(tr.ssa.body)
    return {t: [replace(x, zeroed=len(v) > 1 or t in looped) if x.kind != "store" else x
                for x in v] for t, v in found.items()}




def _placeholders(step):
    """(JVP code, backward code, positions in the backward's order) of an 'op' step, its
    active operands renamed ``_x0, _x1, ...`` so that each term has its own tangent
    ``_d<k>`` and adjoint ``_a<k>`` (``x * x`` has two terms)."""
    _, args = operation(step.node.value)
    ph = [name(f"_x{k}") if k in step.active else a for k, a in enumerate(args)]

    def own(prefix):
        return lambda a: f"_{prefix}{a.id[2:]}" if isinstance(a, gast.Name) and \
            a.id.startswith("_x") else None
    dots, adjs = own("d"), own("a")
    fwd = unparse(step.rule.forward("_z", ph, dots, "_dz"))
    rev = unparse(step.rule.reverse("_z", ph, lambda a: "_az" if isinstance(a, str)
                                    else adjs(a)))
    order = sorted((m.start(), int(m.group(1))) for m in re.finditer(r"\b_a(\d+) [-+]=", rev))
    seen = []
    for _, k in order:
        if k not in seen:
            seen.append(k)
    return compile(fwd, "<jvp rule>", "exec"), compile(rev, "<reverse rule>", "exec"), seen


class _Untouched:
    """An adjoint no line of the rule updated (a branch not taken): ``+= c`` makes it c."""

    def __add__(self, other):
        return 0.0 + other

    def __sub__(self, other):
        return 0.0 - other


_UNTOUCHED = _Untouched()


def _element(expr, env):
    """``x[i]`` shown with its index's value: ``x[2]``; and (array, index tuple)."""
    idx = eval(expr_src(expr.slice), {}, dict(env))
    idx = tuple(int(i) for i in idx) if isinstance(idx, tuple) else (int(idx),)
    return f"{expr.value.id}[{', '.join(map(str, idx))}]", (expr.value.id, idx)


def _entry(step, env, row, rt, code):
    """The Entry of ``step`` run with the primal values ``env`` (``row``: its trace row)."""
    jvp_terms, terms, zero, elements = [], [], "", []

    def shown_name(e):
        if isinstance(e, gast.Subscript):
            text, el = _element(e, env)
            elements.append(el)
            return text
        return e.id
    z = step.target
    dot = f"dot_{z}"
    if step.kind == "op":
        if id(step) not in code:
            code[id(step)] = _placeholders(step)
        fwd, rev, order = code[id(step)]
        _, args = operation(step.node.value)
        local = dict(env, rt=rt, _z=row.value, _az=1.0)
        local.update({f"_x{k}": env[args[k].id] for k in step.active})
        for k in step.active:
            trial = dict(local, **{f"_d{j}": float(j == k) for j in step.active})
            exec(fwd, {}, trial)
            jvp_terms.append((trial["_dz"], f"dot_{args[k].id}"))
        back = dict(local, **{f"_a{j}": _UNTOUCHED for j in step.active})
        exec(rev, {}, back)
        terms = [Term(f"adj_{args[k].id}", back[f"_a{k}"], f"adj_{z}", f"adj_{args[k].id}",
                      f"adj_{z}") for k in order if back[f"_a{k}"] is not _UNTOUCHED]
    elif step.kind == "call":
        callee, args = step.node.value.callee.target, step.node.value.args
        values = [env[a.id] if isinstance(a, gast.Name) else a.value for a in args]
        grads = funcs.grad(callee, argnums=step.active)(*values)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for k, g in zip(step.active, grads):
            unit = tuple(float(j == k) for j in range(len(values)))
            jvp_terms.append((float(funcs.jvp(callee, tuple(values), unit)[1]), f"dot_{args[k].id}"))
            terms.append(Term(f"adj_{args[k].id}", float(g), f"adj_{z}", f"adj_{args[k].id}",
                              f"adj_{z}"))
    elif step.kind == "return":
        vals = step.node.value.elts if isinstance(step.node.value, gast.Tuple) \
            else [step.node.value]
        seeds = ["adj_ret"] if len(vals) == 1 else [f"adj_ret{k}" for k in range(len(vals))]
        for v, g in zip(vals, seeds):
            if v in step.operands:
                jvp_terms.append((1.0, f"dot_{v.id}"))
                terms.append(Term(f"adj_{v.id}", 1.0, g, f"adj_{v.id}", g))
        dot = "dot_ret"
    else:
        for v in step.operands:
            text = shown_name(v)
            jvp_terms.append((1.0, f"dot_{text}"))
        if step.kind in ("store", "accumulate"):
            node = step.node
            place = shown_name(node.target if step.kind == "accumulate" else node.targets[0])
            dot = f"dot_{place}"
            terms = [Term(f"adj_{v.id}", 1.0, f"adj_{z}", f"adj_{v.id}", f"adj_{place}")
                     for v in step.operands]
            zero = f"adj_{place}" if step.kind == "store" else ""
        elif step.kind == "load":
            v = step.operands[0]
            terms = [Term(f"adj_{expr_src(v)}", 1.0, f"adj_{z}", f"adj_{jvp_terms[0][1][4:]}",
                          f"adj_{z}")]
        else:
            terms = [Term(f"adj_{v.id}", 1.0, f"adj_{z}", f"adj_{v.id}", f"adj_{z}")
                     for v in step.operands]
    if step.zeroed:
        zero = f"adj_{z}"
    return Entry("transpose", step, row.value, dot, tuple(jvp_terms), tuple(terms), zero,
                 row.file, row.line, row.source, row.loops), elements


def _run_transpose(entries, seeds):
    """The transposed program run bottom up from ``seeds``: an ``Update`` per line."""
    adj, out = dict(seeds), []
    for e in reversed(entries):
        where = (e.file, e.line, e.loops)
        for t in e.terms:
            adj[t.shown_target] = adj.get(t.shown_target, 0.0) + \
                t.coefficient * adj.get(t.shown_source, 0.0)
            out.append(Update(t.shown_target, t.target, adj[t.shown_target],
                              f"{t.shown_target} += {_coef(t.coefficient)}{t.shown_source}",
                              *where))
        if e.zero:
            adj[e.zero] = 0.0
            out.append(Update(e.zero, "", 0.0, f"{e.zero} = 0", *where))
    return out


def transpose_view(f, *args, tangent=None, seed=None, max_iterations=3, **options):
    """The linearized program of ``f(*args)`` next to its transpose (a ``Transposition``).
    A func: ``ad.transpose_view(f, *args, seed=)``; a kernel: ``ad.transpose_view(kernel,
    dim, inputs=, outputs=, thread=, seed=)`` (one thread, as ``ad.evaluation_trace``)."""
    if not isinstance(f, (Func, Kernel)):
        raise TypeError("ad.transpose_view expects an @ad.func or @ad.kernel, got "
                        f"{type(f).__name__}")
    trace = evaluation_trace(f, *args, tangent=tangent, seed=seed,
                             max_iterations=max_iterations, **options)
    with passes.optimizing(False):
        tr = f.transformed
    found = steps(tr)
    env, entries, elements, code = {}, [], [], {}
    if isinstance(f, Kernel):
        given = list(options.get("inputs", ())) + list(options.get("outputs", ()))
        env.update({p.name: a for p, a in zip(tr.pf.params, given) if not p.is_array})
    else:
        env.update({p.name: float(a) if p.kind == "float" else int(a)
                    for p, a in zip(tr.pf.params, args)})
    arguments = dict(env)
    with backend_scope("python"):
        rt = backend()
    for r in trace.all_rows:
        if r.phase != "primal":
            continue
        env[r.variable] = r.value
        cands = found.get(r.variable, ())
        step = cands[0] if len(cands) == 1 else next(
            (c for c in cands if c.statement == r.statement), None)
        if step is None:
            continue
        entry, els = _entry(step, env, r, rt, code)
        entries.append(entry)
        elements += els
    if isinstance(f, Kernel):
        seeds = _kernel_seeds(f, tr, options, seed, elements)
        where = options.get("thread", 0)
        title = f"# transpose of {f.name}, thread {where} of a launch over {args[0]}"
    else:
        n_ret = len(f.return_kinds)
        s = 1.0 if seed is None else seed
        given = tuple(s) if isinstance(s, (tuple, list)) else (s,) * n_ret
        names = ["adj_ret"] if n_ret == 1 else [f"adj_ret{k}" for k in range(n_ret)]
        seeds = {n: float(v) for n, v in zip(names, given)}
        title = f"# transpose of {f.name}({', '.join(show_value(a, 6) for a in args)})"
    return Transposition(f.name, title, entries, _run_transpose(entries, seeds), seeds,
                         max_iterations, arguments)


def _kernel_seeds(kernel, tr, options, seed, elements):
    """{adj_y[i]: value} for the output elements the thread touches: ``seed``'s arrays
    (default: ones for each float output, as ``ad.evaluation_trace``)."""
    inputs, outputs = list(options.get("inputs", ())), list(options.get("outputs", ()))
    names = {id(a): p.name for p, a in zip(tr.pf.params, inputs + outputs)}
    floats = {p.name for p in tr.pf.differentiable() if p.is_array}
    if seed is None:
        arrays = {names[id(a)]: None for a in outputs if names.get(id(a)) in floats}
    else:
        arrays = {names.get(id(a), a): g.numpy() for a, g in seed.items()}
    out = {}
    for arr, idx in elements:
        if arr in arrays:
            g = arrays[arr]
            out[f"adj_{arr}[{', '.join(map(str, idx))}]"] = 1.0 if g is None else float(g[idx])
    return out
