"""Building modules: the pass list and its runner, keys and the cache, the committed
modules of ``adjoint generate``, the command line and the PTX check.

``passes.py`` names every pass in run order and ``pipeline.py`` runs them; ``inputs.py``
keys a generated module by what the transformer reads (its own source included),
``cache.py`` and ``modules.py`` store and load it, ``bindings.py`` notices a rebound
name; ``generate.py``, ``cli.py`` (with ``cli_point.py``) and ``ptx.py`` are the tools.
"""
