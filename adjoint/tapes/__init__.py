"""Tapes over time: checkpointed steps (``checkpoint.py``), whole time loops
(``simulate.py``, ``simulate_capture.py``), optimizers (``optim.py``) and recorded
copies (``copies.py``)."""
