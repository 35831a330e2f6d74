"""MkDocs hooks: expand ``adjoint show`` markers with real output (see gen_stages.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_stages  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    return gen_stages.expand(markdown)
