"""Helpers shared by the examples: a tiny Adam optimiser and optional plotting.

matplotlib is an optional extra (``pip install -e ".[plot]"``); without it the
examples still run and just say that no plot was written.
"""
import os

import numpy as np


def adam(lr, beta1=0.9, beta2=0.999):
    """A minimal Adam optimiser: ``step(params, grad)`` updates ``params`` in place."""
    state = {"m": 0.0, "v": 0.0, "t": 0}

    def step(params, grad):
        state["t"] += 1
        state["m"] = beta1 * state["m"] + (1 - beta1) * grad
        state["v"] = beta2 * state["v"] + (1 - beta2) * grad * grad
        m_hat = state["m"] / (1 - beta1 ** state["t"])
        v_hat = state["v"] / (1 - beta2 ** state["t"])
        params -= lr * m_hat / (np.sqrt(v_hat) + 1e-12)
    return step


def save_figure(path, draw):
    """Call ``draw(plt)`` and save the figure to ``path``; skip quietly without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written (wanted {path})")
        return None
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot saved to {path}")
    return path
