"""docs/forward-mode.md cannot go stale: its generated blocks are real output, the
generated code its prose quotes is still generated, and the source it quotes by hand
is still in adjoint's source.

The page's generated blocks are markers (``<!-- adjoint show ... -->``, ``include``,
``run``) that docs/gen_stages.py expands when the site is built; these tests expand
them as the build does and compare the prose with the result.
"""
import functools
import os
import re
import sys

import numpy as np
import pytest

from tests.build.test_generate import ROOT

DOCS = os.path.join(ROOT, "docs")
PAGES = ["forward-mode.md", "reverse-mode.md"]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
# a name only generated code has: a tangent, an adjoint, a loop stack, an SSA version, a
# temporary
GENERATED_NAME = re.compile(r"^(?:dot_\w+|adj_\w+|loop\d+_\w+|[a-z]\w*_\d+|t\d+)$")
# spans that name generated code in general, or a rule's template, not a line of this
# kernel's generated code (spans with math symbols, such as `adj_x += Jᵀū`, are skipped)
SCHEMATIC = {
    "forward-mode.md": {"dot_v", "adj_x += adj_z * y", "dot_z = dot_x * y + dot_y * x"},
    "reverse-mode.md": {"adj_x[i] += ..."},
}


def gen_stages():
    sys.path.insert(0, DOCS)
    try:
        import gen_stages
    finally:
        sys.path.remove(DOCS)
    return gen_stages


def page_text(page):
    with open(os.path.join(DOCS, page), encoding="utf-8") as fh:
        return fh.read()


@functools.lru_cache(maxsize=None)
def expanded(page):
    return gen_stages().expand(page_text(page))


def generated_blocks(page):
    """The text of the fenced blocks the markers expanded to."""
    hand_written = set(FENCE.findall(page_text(page)))
    return "\n".join(b for b in FENCE.findall(expanded(page)) if b not in hand_written)


def quoted_generated_code(page):
    """The inline code spans of the page's prose that name something only generated
    code has (``dot_s_1``, ``adj_t2 += adj_t1 * t3``, ``loop0_s_1``)."""
    prose = FENCE.sub("", page_text(page))
    spans = []
    for span in SPAN.findall(prose):
        names = re.findall(r"[A-Za-z_]\w*", span)
        if span.isascii() and any(GENERATED_NAME.match(n) for n in names) \
                and span not in SCHEMATIC[page]:
            spans.append(span)
    return spans


@pytest.mark.parametrize("page", PAGES)
def test_every_marker_expands(page):
    text = expanded(page)
    assert not re.search(r"<!-- (adjoint show|include|run) ", text)


def test_forward_page_shows_the_jvp_the_backward_and_both_jacobians():
    text = expanded("forward-mode.md")
    assert "+def capped_sum_jvp_thread(tid0, n, x, out, dot_x, dot_out" in text
    assert "def capped_sum_backward_thread(" in text
    assert "columns from JVPs" in text and "rows from VJPs" in text
    assert "-> OK" in text and "largest difference:" in text


def test_capped_sum_jacobian_is_the_one_the_page_derives_by_hand():
    """The prose's derivatives for x = 0.8, 0.3, 1.5 and n = 3: 2x, 6x and x/2."""
    text = expanded("forward-mode.md")
    for title in ("columns from JVPs:", "rows from VJPs:"):
        rows = re.search(re.escape(title) + r"\n \[(.*?)\]\n[a-z]", text, re.DOTALL).group(1)
        J = np.array([[float(v) for v in row.strip(" []").split()] for row in rows.split("\n")])
        assert np.allclose(J, np.diag([1.6, 1.8, 0.75]), rtol=0, atol=1e-12), (title, J)


@pytest.mark.parametrize("page", PAGES)
def test_quoted_generated_code_is_still_generated(page):
    spans = quoted_generated_code(page)
    assert spans, "the page quotes no generated code: is the pattern still right?"
    code = generated_blocks(page)
    stale = [s for s in spans if s not in code]
    assert not stale, (f"docs/{page} quotes code that `adjoint show` no longer prints: "
                       f"{stale}; update the prose")


def test_hand_written_source_is_still_adjoints_source():
    """A hand-written block (the rule table's ``mul``) is quoted verbatim from adjoint/."""
    blocks = FENCE.findall(page_text("forward-mode.md"))
    assert blocks
    sources = []
    for folder, _, files in os.walk(os.path.join(ROOT, "adjoint")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(folder, f), encoding="utf-8") as fh:
                    sources.append(fh.read())
    for block in blocks:
        assert any(block in s for s in sources), f"no longer in adjoint/:\n{block}"


def test_site_builds_the_page_with_the_hook():
    """mkdocs expands the markers (the hook) and lists both pages."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as fh:
        config = fh.read()
    assert re.search(r"^hooks:\n  - docs/hooks.py$", config, re.MULTILINE)
    nav = config.split("\nnav:\n", 1)[1]
    for page in PAGES:
        assert re.search(rf"^  - [^:]+: {re.escape(page)}$", nav, re.MULTILINE), page
