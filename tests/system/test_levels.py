"""tests/levels.py, the rerun of every test with no optimization: its comparison."""
import numpy as np

from tests.levels import _Log, compare, plan


def _log(*arrays, inexact=()):
    log = _Log()
    log.values = [np.array(a) for a in arrays]
    log.inexact = set(inexact)
    return log


def test_equal_observations_pass_and_nan_equals_nan():
    a = _log([1.0, np.nan], [3])
    assert compare(a, _log([1.0, np.nan], [3]), "x") is None


def test_a_difference_of_one_ulp_is_named_where_every_pass_is_exact():
    x = np.array([1.0, 2.0])
    y = x.copy()
    y[1] = np.nextafter(2.0, 3.0)
    problem = compare(_log(x), _log(y), "optimized against ADJOINT_OPTIMIZE=0")
    assert problem is not None and "observation 0" in problem and "(1,)" in problem
    assert "bit for bit" in problem


def test_a_pass_that_rounds_otherwise_is_allowed_its_rounding_only():
    x = np.array([1.0, 2.0])
    assert compare(_log(x, inexact={"reciprocal"}), _log(x * (1 + 1e-15)), "x") is None
    problem = compare(_log(x, inexact={"reciprocal"}), _log(x * (1 + 1e-6)), "x")
    assert problem is not None and "tolerance 1e-09" in problem


def test_a_shorter_unoptimized_run_is_compared_as_far_as_it_went():
    """The unoptimized rerun may stop at the test's own assertion (on optimized text)."""
    assert compare(_log([1.0], [2.0]), _log([1.0]), "x") is None
    assert compare(_log([1.0], [2.0]), _log([1.5]), "x") is not None


def test_integers_and_shapes_must_match_exactly():
    assert compare(_log([1, 2]), _log([1, 3]), "x") is not None
    assert compare(_log([1.0, 2.0]), _log([1.0, 2.0, 3.0]), "x") is not None


def test_the_reruns_are_on_the_chosen_backend_only():
    """ADJOINT_TEST_LEVELS=1 compares on python, =numba on numba: a test of that backend
    against its own run, a test with no backend parameter rerun there twice, and the
    other backends' variants not rerun."""
    assert plan(None, "python") == ("python", False)
    assert plan("python", "python") == (None, True)
    assert plan("numba", "python") is None and plan("cuda", "python") is None
    assert plan(None, "numba") == ("numba", False)
    assert plan("numba", "numba") == (None, True)
    assert plan("python", "numba") is None and plan("cuda", "numba") is None

