"""``ir.BlockRewriter`` (issue 41): the one walker of the passes' statement-block rewrites.
It enters an ``if``'s body and orelse, a loop's body and orelse and an IR loop's ``cond``
and ``latch`` blocks; ``copy = True`` leaves the input tree unchanged, ``copy = False``
rewrites in place; ``stmt`` returning ``[]`` deletes a statement, two statements splice.
Also the shared name helpers ``names_in`` and ``unique``."""
import gast

from adjoint.derive import ir

SRC = '''
a = 1
if c:
    b = 2
else:
    d = 3
for i in range(3):
    e = 4
else:
    f = 5
while w:
    g = 6
'''


def _body():
    body = gast.parse(SRC).body
    loop = body[3]          # the while: an IR loop with cond and latch blocks
    body[3] = ir.loop_like(loop, ir.LoopInfo(uid=0, cond=[ir.assign("w", ir.const(True), 9)],
                                             latch=[ir.assign("h", ir.const(7), 9)]))
    return body


def _targets(stmts):
    return [t.id for s in ir.walk_stmts(stmts) if isinstance(s, gast.Assign)
            for t in s.targets]


class _Rename(ir.BlockRewriter):
    """Every assignment's target gets a ``_x`` suffix (recorded in ``seen``)."""

    def __init__(self, copy=False):
        self.copy, self.seen = copy, []

    def stmt(self, s):
        if isinstance(s, gast.Assign):
            self.seen.append(s.targets[0].id)
            new = ir.assign(s.targets[0].id + "_x", s.value, s.lineno)
            return [new]
        return self.nested(s)


def test_block_enters_every_nested_block():
    body = _body()
    r = _Rename()
    out = r.block(body)
    assert r.seen == ["a", "b", "d", "e", "f", "g", "w", "h"]
    assert _targets(out) == ["a_x", "b_x", "d_x", "e_x", "g_x", "w_x", "h_x"]
    loop = out[3]
    assert [s.targets[0].id for s in loop.loop.cond] == ["w_x"]
    assert [s.targets[0].id for s in loop.loop.latch] == ["h_x"]
    assert out[2].orelse[0].targets[0].id == "f_x"


def test_copy_false_rewrites_in_place():
    body = _body()
    info = body[3].loop
    out = _Rename(copy=False).block(body)
    assert out[1] is body[1] and out[3] is body[3] and out[3].loop is info
    assert body[1].body[0].targets[0].id == "b_x"
    assert info.cond[0].targets[0].id == "w_x"


def test_copy_true_leaves_the_input_unchanged():
    body = _body()
    before = [gast.dump(s) for s in body]
    info = body[3].loop
    cond, latch = list(info.cond), list(info.latch)
    out = _Rename(copy=True).block(body)
    assert [gast.dump(s) for s in body] == before
    assert info.cond == cond and info.latch == latch
    assert out[1] is not body[1] and out[3] is not body[3] and out[3].loop is not info
    assert out[3].loop.uid == info.uid
    assert out[3].loop.cond[0].targets[0].id == "w_x"
    assert _targets(out) == ["a_x", "b_x", "d_x", "e_x", "g_x", "w_x", "h_x"]


class _Splice(ir.BlockRewriter):
    """Drops ``b = 2``; writes ``e = 4`` twice; leaves everything else."""

    def stmt(self, s):
        if isinstance(s, gast.Assign) and s.targets[0].id == "b":
            return []
        if isinstance(s, gast.Assign) and s.targets[0].id == "e":
            return [s, ir.assign("e2", ir.const(0), s.lineno)]
        return self.nested(s)


def test_empty_list_deletes_and_two_statements_splice():
    out = _Splice().block(_body())
    assert out[1].body == []
    assert [s.targets[0].id for s in out[2].body] == ["e", "e2"]
    assert _targets(out) == ["a", "d", "e", "e2", "g", "w", "h"]


def test_default_rewriter_is_identity():
    body = _body()
    before = [gast.dump(s) for s in body]
    out = ir.BlockRewriter().block(body)
    assert out == body and [gast.dump(s) for s in out] == before


def test_names_in_and_unique():
    body = _body()
    assert ir.names_in(body[1]) == {"c", "b", "d"}
    assert ir.names_in(body) >= {"a", "c", "i", "range", "w", "g"}
    assert "h" not in ir.names_in(body)        # a LoopInfo's blocks are not fields
    taken = {"x", "_x"}
    assert ir.unique(taken, "x") == "__x" and "__x" in taken
    assert ir.unique(taken, "y") == "y" and "y" in taken
