"""Errors: unsupported syntax is a TransformError pointing at the user's line;
bad launch arguments are a LaunchError naming the kernel and the parameter."""
import os
import subprocess
import sys

import numpy as np
import pytest

import adjoint as ad

HEADER = '''
def helper(v):
    return v * 2.0


@ad.func
def twice(x: float) -> float:
    return x * 2.0


G = [1.0]

'''

# (case id, kernel body lines, marker: text of the offending line).
# The kernel is ``bad(x: array, out: array)`` (``x`` is 2-D for the ``arr[i][j]`` case).
UNSUPPORTED = [
    ("lambda", ["f = lambda v: v * 2.0", "out[i] = x[i]"], "f = lambda v: v * 2.0"),
    ("try_finally", ["y = 0.0", "try:", "    y = x[i]", "finally:", "    y = 1.0",
                     "out[i] = y"], "try:"),
    ("try_except", ["y = 0.0", "try:", "    y = x[i]", "except Exception:",
                    "    y = 1.0", "out[i] = y"], "try:"),
    ("with", ["with open('f') as fh:", "    out[i] = x[i]"], "with open('f') as fh:"),
    ("listcomp", ["ys = [x[i] for k in range(3)]", "out[i] = x[i]"],
     "ys = [x[i] for k in range(3)]"),
    ("class", ["class C:", "    pass", "out[i] = x[i]"], "class C:"),
    ("nested_def", ["def inner():", "    return 1.0", "out[i] = x[i]"], "def inner():"),
    ("nested_def_with_param", ["def inner(v):", "    return v", "out[i] = x[i]"],
     "def inner(v):"),
    ("global", ["global G", "out[i] = x[i]"], "global G"),
    ("unknown_call", ["y = helper(x[i])", "out[i] = y"], "y = helper(x[i])"),
    ("unknown_name", ["y = x[i] * not_defined_anywhere", "out[i] = y"],
     "y = x[i] * not_defined_anywhere"),
    ("for_non_range", ["s = 0.0", "for v in x:", "    s = s + v", "out[i] = s"], "for v in x:"),
    ("chained_subscript", ["out[i] = x[i][0]"], "out[i] = x[i][0]"),
    # (an @ad.func takes keyword arguments: tests/frontend/test_func_calls.py)
    ("keyword_args_of_a_builtin", ["out[i] = ad.clamp(x[i], lo=0.0, hi=1.0)"],
     "out[i] = ad.clamp(x[i], lo=0.0, hi=1.0)"),
    ("read_then_write_same_array", ["x[i] = x[i] * 2.0", "out[i] = x[i]"],
     "x[i] = x[i] * 2.0"),
]


def _case_id(case):
    return case.values[0] if hasattr(case, "values") else case[0]


def _kernel_source(body):
    xdim = 2 if any("x[i][0]" in line for line in body) else 1
    lines = ["@ad.kernel",
             f"def bad(x: ad.array(dtype=float, ndim={xdim}), out: ad.array(dtype=float)):",
             "    i = ad.tid()"] + ["    " + line for line in body]
    return HEADER + "\n".join(lines) + "\n", xdim


def _written_file(tmp_path):
    files = sorted(tmp_path.glob("adjoint_test_kernels_*.py"))
    assert len(files) == 1
    return files[0]


def _line_of(path, marker):
    lines = path.read_text().splitlines()
    hits = [k + 1 for k, line in enumerate(lines) if line.strip() == marker]
    assert len(hits) == 1, marker
    return hits[0]


def _assert_points_at(err, path, marker):
    lineno = _line_of(path, marker)
    msg = str(err)
    assert str(path) in msg or path.name in msg, msg
    assert f":{lineno}:" in msg, msg
    assert marker in msg, msg
    assert err.lineno == lineno


@pytest.mark.parametrize("case,body,marker", UNSUPPORTED, ids=[_case_id(c) for c in UNSUPPORTED])
def test_unsupported_syntax_at_first_launch(backend, kernel_module, tmp_path, case, body,
                                            marker):
    text, xdim = _kernel_source(body)
    x = ad.zeros((3, 2) if xdim == 2 else 3)
    out = ad.zeros(3)
    with pytest.raises(ad.TransformError) as info:
        m = kernel_module(text)       # an error at decoration time is fine too
        ad.launch(m.bad, 3, inputs=[x], outputs=[out])
    _assert_points_at(info.value, _written_file(tmp_path), marker)
    assert "numba" not in str(info.value).lower()


@pytest.mark.parametrize("case,body,marker", UNSUPPORTED[::4],
                         ids=[_case_id(c) for c in UNSUPPORTED[::4]])
def test_unsupported_syntax_in_source(kernel_module, tmp_path, case, body, marker):
    text, _ = _kernel_source(body)
    with pytest.raises(ad.TransformError) as info:
        m = kernel_module(text)
        ad.source(m.bad, "backward")
    _assert_points_at(info.value, _written_file(tmp_path), marker)


def test_nonlocal(backend, kernel_module, tmp_path):
    text = HEADER + '''
def make():
    scale = 1.0

    @ad.kernel
    def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        nonlocal scale
        i = ad.tid()
        out[i] = x[i] * scale
    return bad
'''
    with pytest.raises(ad.TransformError) as info:
        m = kernel_module(text)
        ad.launch(m.make(), 3, inputs=[ad.zeros(3)], outputs=[ad.zeros(3)])
    _assert_points_at(info.value, _written_file(tmp_path), "nonlocal scale")


def test_unsupported_syntax_in_func_called_from_kernel(backend, kernel_module, tmp_path):
    text = HEADER + '''
@ad.func
def uses_lambda(v: float) -> float:
    g = lambda t: t + 1.0
    return v


@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = uses_lambda(x[i])
'''
    with pytest.raises(ad.TransformError) as info:
        m = kernel_module(text)
        ad.launch(m.bad, 3, inputs=[ad.zeros(3)], outputs=[ad.zeros(3)])
    _assert_points_at(info.value, _written_file(tmp_path), "g = lambda t: t + 1.0")


# -- errors that say what to write instead (issue 38) ------------------------------------

# (case id, module source, the offending line, phrases the message holds). Each module
# defines ``bad(x, out)``, launched on two float arrays.
HELPFUL = [
    ("np_sin", """
@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = np.sin(x[i]) * 2.0
""", "out[i] = np.sin(x[i]) * 2.0", ["np.sin is NumPy's", "math.sin (or ad.sin)"]),
    ("numpy_arctan2", """
import numpy

@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = numpy.arctan2(x[i], 1.0)
""", "out[i] = numpy.arctan2(x[i], 1.0)", ["numpy.arctan2 is NumPy's", "math.atan2"]),
    ("np_linalg_norm", """
@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = np.linalg.norm(x[i])
""", "out[i] = np.linalg.norm(x[i])", ["np.linalg.norm is NumPy's", "ad.length"]),
    ("ad_grad_in_kernel", """
@ad.func
def energy(r: float) -> float:
    return r * r * r

@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = -ad.grad(energy)(x[i])
""", "out[i] = -ad.grad(energy)(x[i])",
     ["ad.grad is Python-only", "ad.Tape", "tape.backward()",
      "energy_jvp = adjoint.printed.jvp_func(energy)", "energy_jvp(x, 1.0)"]),
    ("ad_jvp_in_func", """
@ad.func
def energy(r: float) -> float:
    return r * r * r

@ad.func
def force(r: float) -> float:
    e, de = ad.jvp(energy, (r,), (1.0,))
    return -de

@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = force(x[i])
""", "e, de = ad.jvp(energy, (r,), (1.0,))",
     ["ad.jvp is Python-only", "in 'force'", "jvp_func(energy)"]),
    ("ad_hessian_in_kernel", """
@ad.func
def energy(r: float) -> float:
    return r * r * r

@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = ad.hessian(energy)(x[i])
""", "out[i] = ad.hessian(energy)(x[i])", ["ad.hessian is Python-only", "ad.Tape"]),
    ("shape_of_unannotated_kernel_parameter", """
@ad.kernel
def bad(x,
        out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = float(x.shape[0])
""", "def bad(x,", ["parameter 'x' needs an annotation", "used as an array",
                   "x.shape", "x: ad.array(dtype=float)"]),
    ("two_indices_of_unannotated_kernel_parameter", """
@ad.kernel
def bad(x, out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i, 0]
""", "def bad(x, out: ad.array(dtype=float)):",
     ["x: ad.array(dtype=float, ndim=2)"]),
    ("shape_of_unannotated_func_parameter", """
@ad.func
def count(v) -> float:
    return float(v.shape[0])

@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = count(x)
""", "return float(v.shape[0])",
     ["'v' has no annotation, so it is a float", "v: ad.array(dtype=float)"]),
    ("transform_has_no_x", """
@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    t = ad.transform()
    out[i] = t.x
""", "out[i] = t.x", ["a transform has no component '.x'", ".p, the translation",
                      ".q, the rotation"]),
    ("unknown_attribute_of_an_element", """
@ad.kernel
def bad(x: ad.array(dtype=ad.transform), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i].position.x
""", "out[i] = x[i].position.x", ["attribute '.position' is not supported",
                                  "t.p, t.q of a transform"]),
]


@pytest.mark.parametrize("case,source,marker,phrases", HELPFUL, ids=[c[0] for c in HELPFUL])
def test_errors_say_what_to_write_instead(kernel_module, tmp_path, case, source, marker,
                                          phrases):
    m = kernel_module(source)
    x = ad.zeros(3, dtype=ad.transform) if "dtype=ad.transform" in source else ad.zeros(3)
    with pytest.raises(ad.TransformError) as info:
        ad.launch(m.bad, 3, inputs=[x], outputs=[ad.zeros(3)])
    _assert_points_at(info.value, _written_file(tmp_path), marker)
    for phrase in phrases:
        assert phrase in str(info.value), str(info.value)


STRUCT_ARRAYS = """
@ad.struct
class Particle:
    x: float
    v: float
"""


@pytest.mark.parametrize("line", [
    "def step(p: ad.array(dtype=Particle), out: ad.array(dtype=float)): pass",
    "ps = ad.array([Particle(1.0, 2.0), Particle(3.0, 4.0)])",
    "ps = ad.zeros(4, dtype=Particle)",
], ids=["annotation", "data", "zeros"])
def test_an_array_of_structs_is_refused_naming_the_struct_and_the_line(kernel_module,
                                                                       tmp_path, line):
    with pytest.raises(TypeError) as info:
        kernel_module(STRUCT_ARRAYS + line + "\n")
    msg = str(info.value)
    path = _written_file(tmp_path)
    assert f"{path}:{_line_of(path, line)}: {line}" in msg, msg
    assert "arrays of structs are not supported: Particle is an @ad.struct" in msg, msg
    assert "a struct of arrays" in msg and "s.x[i]" in msg, msg


# --------------------------------------------------------------------------- launch checks

LAUNCHABLE = '''
@ad.kernel
def scaled(x: ad.array(dtype=float), s: float, out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * s


@ad.kernel
def plane(x: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    out[i, j] = x[i, j] * 2.0
'''


def _launch_error(fn):
    with pytest.raises(ad.LaunchError) as info:
        fn()
    return str(info.value)


def test_launch_argument_checks(backend, kernel_module):
    m = kernel_module(LAUNCHABLE)
    x, out = ad.zeros(4), ad.zeros(4)
    msg = _launch_error(lambda: ad.launch(m.scaled, 4, inputs=[x], outputs=[out]))
    assert "scaled" in msg and "3" in msg and "2" in msg
    msg = _launch_error(lambda: ad.launch(m.scaled, 4, inputs=[x, 1.0, 2.0], outputs=[out]))
    assert "scaled" in msg and "4" in msg

    cases = {
        "x": [ad.zeros(4, dtype=ad.float32), 1.0, out],          # wrong dtype
        "out": [x, 1.0, ad.zeros((4, 1))],                       # wrong ndim
        "s": [x, ad.zeros(1), out],                               # array for a scalar
    }
    for param, args in cases.items():
        msg = _launch_error(lambda: ad.launch(m.scaled, 4, inputs=args[:2], outputs=args[2:]))
        assert "scaled" in msg and f"'{param}'" in msg, msg
    msg = _launch_error(lambda: ad.launch(m.scaled, 4, inputs=[2.0, 1.0], outputs=[out]))
    assert "scaled" in msg and "'x'" in msg                       # scalar for an array
    msg = _launch_error(lambda: ad.launch(m.scaled, 4, inputs=[ad.zeros(4, dtype=ad.int64), 1.0],
                                          outputs=[out]))
    assert "scaled" in msg and "'x'" in msg
    # nothing ran: the output is untouched by the refused launches
    np.testing.assert_array_equal(out.numpy(), 0.0)


def test_launch_dim_checks(backend, kernel_module):
    m = kernel_module(LAUNCHABLE)
    x, out = ad.zeros((2, 3)), ad.zeros((2, 3))
    for dim in [6, (2,), (2, 3, 1)]:
        msg = _launch_error(lambda: ad.launch(m.plane, dim, inputs=[x], outputs=[out]))
        assert "plane" in msg and "2" in msg
    msg = _launch_error(lambda: ad.launch(m.scaled, (2, 2), inputs=[ad.zeros(4), 1.0],
                                          outputs=[ad.zeros(4)]))
    assert "scaled" in msg
    ad.launch(m.plane, (2, 3), inputs=[ad.ones((2, 3))], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), 2.0)


DEVICE_SCRIPT = r'''
import sys
sys.path.insert(0, {dir!r})
from numba import cuda
import adjoint as ad
if cuda.is_available():
    print("HAS-CUDA")
    sys.exit(0)
import cuda_kernels as m
for what, fn in [("launch", lambda: ad.launch(m.scaled, 4, inputs=[ad.zeros(4), 1.0],
                                               outputs=[ad.zeros(4)], device="cuda")),
                 ("zeros", lambda: ad.zeros(4, device="cuda"))]:
    try:
        fn()
        print(what, "NO-ERROR")
    except Exception as err:
        print(what, "RAISED", type(err).__name__, isinstance(err, (ad.AdjointError, RuntimeError,
              ValueError)), str(err).replace("\n", " "))
'''


@pytest.fixture(scope="module")
def cuda_refusal(tmp_path_factory):
    """Launch with device="cuda" in a process with no GPU and no CUDA simulator."""
    d = tmp_path_factory.mktemp("cuda_refusal")
    (d / "cuda_kernels.py").write_text("import adjoint as ad\n" + LAUNCHABLE)
    (d / "run.py").write_text(DEVICE_SCRIPT.format(dir=str(d)))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", ADJOINT_CACHE_DIR=str(d / "cache"))
    proc = subprocess.run([sys.executable, str(d / "run.py")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if "HAS-CUDA" in proc.stdout:
        pytest.skip("a CUDA GPU is present: device='cuda' is legitimate here")
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines())


def test_device_cuda_without_gpu_is_refused(cuda_refusal):
    for what in ("launch", "zeros"):
        out = cuda_refusal[what]
        assert out.startswith("RAISED") and " True " in out, out
        assert "cuda" in out, out


def test_device_cuda_error_names_the_kernel(cuda_refusal):
    assert "scaled" in cuda_refusal["launch"]


def test_kernel_called_directly_is_an_error(kernel_module):
    m = kernel_module(LAUNCHABLE)
    with pytest.raises(ad.AdjointError) as info:
        m.scaled(ad.zeros(4), 1.0, ad.zeros(4))
    assert "ad.launch" in str(info.value)


def test_same_array_read_and_written_is_refused(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def double(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[i] * 2.0
        ''')
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(ad.LaunchError) as err:
        ad.launch(m.double, 3, inputs=[u], outputs=[u])
    msg = str(err.value)
    assert "double" in msg and "'x'" in msg and "'out'" in msg
    np.testing.assert_array_equal(u.numpy(), [1.0, 2.0, 3.0])      # nothing was run


@pytest.mark.parametrize("cpu_backend", ["python", "numba"])
def test_overlapping_views_of_one_buffer_read_and_written_are_refused(cpu_backend, kernel_module):
    """Different numpy views of one buffer have different ids: the check compared ids."""
    m = kernel_module('''
        @ad.kernel
        def double(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[i] * 2.0
        ''')
    buf = np.arange(6.0)
    with ad.backend_scope(cpu_backend):
        for x, out in ((buf, buf[:]), (buf[:3], buf[2:5])):
            with pytest.raises(ad.LaunchError, match="overlapping views"):
                ad.launch(m.double, 3, inputs=[x], outputs=[out])
        np.testing.assert_array_equal(buf, np.arange(6.0))              # nothing was run
        ad.launch(m.double, 3, inputs=[buf[:3]], outputs=[buf[3:]])     # disjoint views run
    np.testing.assert_array_equal(buf, [0.0, 1.0, 2.0, 0.0, 2.0, 4.0])


def test_two_funcs_with_one_name_are_refused(kernel_module):
    helpers = kernel_module('''
        @ad.func
        def scale(v: float) -> float:
            return v * 3.0
        ''')
    m = kernel_module(f'''
        import {helpers.__name__} as other

        @ad.func
        def scale(v: float) -> float:
            return v * 2.0

        @ad.kernel
        def both(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = scale(x[i]) + other.scale(x[i])
        ''')
    with pytest.raises(ad.AdjointError, match="named 'scale'"):
        ad.launch(m.both, 2, inputs=[ad.zeros(2)], outputs=[ad.zeros(2)])


def test_wrong_number_of_indices_is_refused_with_file_and_line(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def rows(x: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[i]
        ''')
    with pytest.raises(ad.TransformError) as err:
        ad.launch(m.rows, 2, inputs=[ad.zeros((2, 3))], outputs=[ad.zeros(2)])
    msg = str(err.value)
    line = open(m.__file__).read().splitlines().index("    out[i] = x[i]") + 1
    assert f":{line}:" in msg and "out[i] = x[i]" in msg and "2 dimension(s)" in msg


# -- what the user sees: their frame and our message, not adjoint's internals --------

TRACEBACK_SCRIPT = '''\
import numpy as np
import adjoint as ad
{select}


@ad.kernel
def bad(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = {body}


x, y = ad.zeros(4), ad.zeros(4)
ad.launch(bad, 4, inputs={inputs}, outputs=[y])
'''
TRACEBACK_CASES = {
    # case: (kernel body, launch inputs, error class, what the message quotes)
    "transform": ("open('data.txt')", "[x]", "TransformError", "y[i] = open('data.txt')"),
    "launch": ("x[i] * 2.0", "[x, x]", "LaunchError", "takes 2 arguments"),
}


def _run_traceback_script(tmp_path, backend, case, full):
    body, inputs, _, _ = TRACEBACK_CASES[case]
    select = 'ad.use_backend("cuda")' if backend == "cuda" else ""
    script = tmp_path / "user_script.py"
    script.write_text(TRACEBACK_SCRIPT.format(select=select, body=body, inputs=inputs))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, ADJOINT_TRACEBACK="1" if full else "0",
               ADJOINT_JIT="0" if backend == "python" else "1")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 1
    return script, r.stderr


@pytest.mark.parametrize("case", sorted(TRACEBACK_CASES))
def test_traceback_shows_the_users_frame_and_our_message(backend, tmp_path, case):
    script, err = _run_traceback_script(tmp_path, backend, case, full=False)
    lines = err.strip().splitlines()
    frames = [ln for ln in lines if ln.startswith('  File "')]
    assert frames[0] == f'  File "{script}", line 13, in <module>', err
    assert "ad.launch(bad, 4" in lines[lines.index(frames[0]) + 1]
    # one more frame: the line of adjoint's that re-raises, saying how to see the rest
    assert len(frames) == 2 and "ADJOINT_TRACEBACK=1" in err, err
    assert len(lines) <= 12, err
    _, _, cls, quoted = TRACEBACK_CASES[case]
    assert f"adjoint.errors.{cls}: " in err and quoted in err
    if case == "transform":
        assert f"{script}:9:" in err


def test_adjoint_traceback_1_shows_every_frame(backend, tmp_path):
    script, err = _run_traceback_script(tmp_path, backend, "transform", full=True)
    assert f'File "{script}", line 13' in err
    for internal in ("pipeline.py", "parse.py", "api.py"):
        assert internal in err, err
    assert len(err.splitlines()) > 20


def test_grads_keys_must_be_arrays(backend, kernel_module):
    m = kernel_module(LAUNCHABLE)
    x = ad.array(np.arange(4.0), requires_grad=True)
    out = ad.zeros(4, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.scaled, 4, inputs=[x, 3.0], outputs=[out])
    # the hashable mistakes reach backward: a name, an index, a tuple, a device buffer
    mistakes = {"out": "builtins.str", 0: "builtins.int", ("out",): "builtins.tuple"}
    if getattr(type(out.data), "__hash__", None) is not None:
        mistakes[out.data] = type(out.data).__qualname__          # a (real) CUDA device array
    for key, kind in mistakes.items():
        with pytest.raises(ad.TapeError) as info:
            tape.backward(grads={key: np.ones(4)})
        msg = str(info.value)
        assert "keys of grads= must be ad.Array" in msg and kind in msg, msg
    with pytest.raises(ad.TapeError, match="must be ad.Array"):
        tape.backward(loss=np.zeros(1))
    # a numpy array is not even hashable: Python refuses the dict before adjoint sees it
    with pytest.raises(TypeError, match="unhashable type: 'numpy.ndarray'"):
        {out.numpy(): np.ones(4)}
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)         # nothing ran
    tape.backward(grads={out: np.ones(4)})
    np.testing.assert_array_equal(x.grad.numpy(), 3.0)         # d(x * s)/dx = s
