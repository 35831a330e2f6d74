"""The Warp-style example programs (examples/warp_*.py), which import only
``adjoint.warp as wp``: each one's gradient against central differences of its float32
loss, its optimization improving, and, where NVIDIA Warp is installed, the same program
with ``import warp as wp`` giving the same gradient on Warp's CPU device.

- warp_springs.py: a chain on springs with flag bits (``wp.constant``, ``&`` on a
  ``uint32`` array, an early ``return``), forces by ``atomic_add``/``atomic_sub``;
- warp_rigid_body.py: a tumbling rigid body (``wp.transform``, ``wp.spatial_vector``,
  quaternion integration, ``wp.transform_point``);
- warp_fluid.py: smoke advected and diffused on a 2-D grid (a func reading an array,
  bilinear lookups at data-dependent indices), its gradient checkpointed by hand as
  Warp's checkpointed fluid example does it: bit for bit the plain tape's.
(examples/warp_trajectory.py: tests/warp/test_warp_namespace.py.)
"""
import importlib.util
import os
import sys

import numpy as np
import pytest

from tests.build.test_generate import ROOT
from tests.warp.test_warp_namespace import _real_warp

EXAMPLES = os.path.join(ROOT, "examples")
SMALL = {"warp_springs": dict(n=6, steps=20), "warp_rigid_body": dict(steps=25),
         "warp_fluid": dict(n=12, steps=12, every=4)}


def _load(name, folder=EXAMPLES, module_name=None):
    spec = importlib.util.spec_from_file_location(module_name or name,
                                                  os.path.join(folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # (kernels find their module's globals)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def examples():
    return {name: _load(name) for name in SMALL}


def _gradient(ex):
    return ex.plain_gradient() if hasattr(ex, "plain_gradient") else ex.gradient()


def test_springs_with_flags_match_central_differences_and_improve(examples):
    m = examples["warp_springs"]
    ex = m.Example(**SMALL["warp_springs"])
    assert ex.check_gradient() < 2e-3
    loss, grad = ex.gradient()
    assert grad.dtype == np.float32 and grad.shape == (5,) and np.abs(grad).max() > 0
    opt = m.wp.optim.SGD([ex.rest], lr=0.02)
    first = ex.step(opt)
    for _ in range(3):
        ex.step(opt)
    assert ex.forward() < first


def test_the_pinned_particle_stays_where_its_flag_pins_it(examples):
    m = examples["warp_springs"]
    ex = m.Example(**SMALL["warp_springs"])
    x, v = ex.x0, m.wp.zeros(ex.n, dtype=m.wp.vec3)
    f = m.wp.zeros(ex.n, dtype=m.wp.vec3)
    x_new, v_new = m.wp.zeros_like(x), m.wp.zeros_like(v)
    m.wp.launch(m.integrate, dim=ex.n, inputs=[x, v, f, ex.flags, ex.gravity, 1.0, 0.1],
                outputs=[x_new, v_new])
    np.testing.assert_array_equal(x_new.numpy()[0], x.numpy()[0])       # pinned
    np.testing.assert_allclose(v_new.numpy()[1:, 1], -0.98, rtol=1e-6)  # falling


def test_rigid_body_matches_central_differences_and_improves(examples):
    m = examples["warp_rigid_body"]
    ex = m.Example(**SMALL["warp_rigid_body"])
    assert ex.check_gradient() < 5e-3
    opt = m.wp.optim.SGD([ex.qd0], lr=0.05, momentum=0.5)
    first = ex.step(opt)
    for _ in range(3):
        ex.step(opt)
    assert ex.forward() < first


def test_the_checkpointed_fluid_gradient_is_the_plain_tapes_bit_for_bit(examples):
    m = examples["warp_fluid"]
    ex = m.Example(**SMALL["warp_fluid"])
    same, worst = ex.check_gradient(cells=((6, 6), (3, 8)))
    assert same == 0.0 and worst < 1e-2
    loss, grad = ex.checkpointed_gradient()
    ex.rho0.assign(ex.rho0.numpy() - 0.5 * grad)
    assert ex.forward() < loss


@pytest.mark.parametrize("name", sorted(SMALL))
def test_nvidia_warp_gives_the_same_gradient(name, examples, tmp_path):
    """The example with its import line changed to ``import warp as wp``, on Warp's CPU
    device: the same loss and gradient to float32 rounding."""
    _real_warp()
    text = open(os.path.join(EXAMPLES, f"{name}.py")).read()
    assert text.count("\nimport adjoint.warp as wp\n") == 1
    (tmp_path / f"{name}.py").write_text(text.replace(
        "\nimport adjoint.warp as wp\n", "\nimport warp as wp\nimport warp.optim\n"))
    real = _load(name, str(tmp_path), f"real_{name}")
    ours_loss, ours = _gradient(examples[name].Example(**SMALL[name]))
    real_loss, want = _gradient(real.Example(**SMALL[name]))
    assert ours.dtype == want.dtype == np.float32
    np.testing.assert_allclose(ours_loss, real_loss, rtol=1e-5)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
