"""JAX interop: a kernel as a JAX function, differentiable with ``jax.grad``.

    import adjoint.jax                        # needs the optional extra adjoint[jax]
    energy = adjoint.jax.jax_kernel(springs_energy)          # (x, k, out) -> (out,)
    (e,) = energy(x, 2.0)                     # x: a JAX array; 2.0: a scalar parameter

The calling convention is NVIDIA Warp's ``jax_kernel``: the kernel's parameters are its
inputs and then its ``num_outputs`` outputs; the wrapper takes the inputs (JAX or numpy
arrays, Python or JAX scalars) and returns a tuple of new output arrays.

* Launch dims: ``launch_dims``, else the shape of the first array input. Output shapes:
  ``output_dims`` (one shape for all, or ``{name: shape}``), else the launch dims; both
  may be given per call. Outputs start as zeros of the parameter's dtype.
* The kernel runs on the CPU through ``jax.pure_callback``, so the wrapper works inside
  ``jax.jit``. An input array's dtype and rank must be the parameter's: nothing is cast.
* Differentiation: a ``jax.custom_vjp`` whose backward launches the kernel's backward
  on copies of the output cotangents (``jax.grad``, ``jax.vjp``, ``jax.jacrev``). JAX
  allows a custom VJP or a custom JVP, not both, and ``jax.grad`` through a custom JVP
  would transpose an opaque callback: ``differentiable="jvp"`` gives a
  ``jax.custom_jvp`` from adjoint's forward mode instead (``jax.jvp``, ``jax.jacfwd``).
  Integer arrays and scalar parameters get no gradient; differentiating with respect
  to a JAX scalar given for one is refused rather than answered with a silent zero.
* A fault the kernel finds (``ad.BoundsError``) reaches the caller as JAX's
  ``JaxRuntimeError``, adjoint's message kept; a derivative the kernel was generated
  without (``enable_backward=False``) is refused while tracing.
* ``jax.vmap`` runs the kernel once per batch element (``vmap_method="sequential"``).
  Higher derivatives are not supported: the generated backward is not differentiable.

More in docs/tape.md, "JAX".
"""
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import AdjointError
from ..runtime.launch import launch

__all__ = ["jax_kernel", "JaxKernel"]


def _is_static(value):
    """A Python (or numpy) number: baked into the traced program, never differentiated."""
    return isinstance(value, (numbers.Number, np.generic))


def _shape(dims, what):
    if isinstance(dims, numbers.Integral):
        return (int(dims),)
    try:
        return tuple(int(d) for d in dims)
    except TypeError:
        raise AdjointError(f"{what}: expected an int or a tuple of ints, got {dims!r}") from None


def _host(values):
    """Host arrays the kernel may read and write (the callback hands over JAX arrays or
    read-only numpy views): numpy, contiguous, writable; copies where needed."""
    return [np.require(np.asarray(v), requirements=["C", "W"]) for v in values]


class JaxKernel:
    """``kernel`` as a JAX function of its inputs returning its outputs (see the module)."""

    def __init__(self, kernel, num_outputs=1, launch_dims=None, output_dims=None,
                 differentiable="vjp"):
        if differentiable not in ("vjp", "jvp"):
            raise AdjointError(f"jax_kernel: differentiable is 'vjp' or 'jvp', "
                               f"not {differentiable!r}")
        self.kernel, self.num_outputs = kernel, int(num_outputs)
        self.launch_dims, self.output_dims = launch_dims, output_dims
        self.differentiable = differentiable
        params = self.spec.params
        if not 1 <= self.num_outputs <= len(params):
            raise AdjointError(f"jax_kernel: kernel '{self.spec.name}' has {len(params)} "
                               f"parameters; num_outputs={num_outputs} is out of range")
        for p in params[len(params) - self.num_outputs:]:
            if not p.is_array:
                raise AdjointError(f"jax_kernel: output '{p.name}' of kernel "
                                   f"'{self.spec.name}' is not an array (num_outputs="
                                   f"{num_outputs}: the last parameters are the outputs)")

    @property
    def spec(self):
        return self.kernel.spec_for("cpu") if hasattr(self.kernel, "spec_for") \
            else self.kernel.spec

    def __repr__(self):
        return f"<adjoint.jax.jax_kernel of {self.spec.name}>"

    def __call__(self, *args, launch_dims=None, output_dims=None):
        spec = self.spec
        n_in = len(spec.params) - self.num_outputs
        ins, outs = spec.params[:n_in], spec.params[n_in:]
        if len(args) != n_in:
            names = ", ".join(p.name for p in ins) or "none"
            raise AdjointError(f"kernel '{spec.name}' wrapped by jax_kernel takes {n_in} "
                               f"inputs ({names}; outputs {', '.join(p.name for p in outs)} "
                               f"are returned), got {len(args)} arguments")
        static = [a if _is_static(a) else None for a in args]
        args = [a if s is not None else jnp.asarray(a) for a, s in zip(args, static)]
        for p, a in zip(ins, args):
            self._check(spec, p, a)
        dims = self._launch_dims(spec, ins, args, launch_dims)
        shapes = self._output_shapes(spec, outs, dims, output_dims)
        result = tuple(jax.ShapeDtypeStruct(s, p.np_dtype) for p, s in zip(outs, shapes))
        traced = [a for a, s in zip(args, static) if s is None]
        call = _Call(spec, dims, static, result)
        fn = call.vjp_function() if self.differentiable == "vjp" else call.jvp_function()
        return fn(*traced)

    @staticmethod
    def _check(spec, p, a):
        where = f"kernel '{spec.name}', parameter '{p.name}'"
        if _is_static(a):
            if p.is_array:
                raise AdjointError(f"{where} is {p.describe()}; got the scalar {a!r}")
            return
        shape, dtype = np.shape(a), np.dtype(a.dtype)
        if p.is_array and (len(shape) != p.ndim or dtype != p.np_dtype):
            raise AdjointError(f"{where} is {p.describe()}; got an array of dtype {dtype} "
                               f"and shape {shape} (nothing is cast: give the parameter's "
                               "dtype; 64-bit dtypes in JAX need jax_enable_x64)")
        if not p.is_array and shape != ():
            raise AdjointError(f"{where} is a scalar {p.dtype}; got an array of shape {shape}")

    def _launch_dims(self, spec, ins, args, override):
        dims = override if override is not None else self.launch_dims
        if dims is not None:
            return _shape(dims, f"kernel '{spec.name}': launch_dims")
        for p, a in zip(ins, args):
            if p.is_array:
                return tuple(np.shape(a))
        raise AdjointError(f"kernel '{spec.name}' has no array input to take the launch "
                           "dims from: give launch_dims")

    def _output_shapes(self, spec, outs, dims, override):
        given = override if override is not None else self.output_dims
        if isinstance(given, dict):
            unknown = set(given) - {p.name for p in outs}
            if unknown:
                raise AdjointError(f"kernel '{spec.name}': output_dims names "
                                   f"{sorted(unknown)}, which are not outputs "
                                   f"({', '.join(p.name for p in outs)})")
            shapes = [given.get(p.name, dims) for p in outs]
        else:
            shapes = [dims if given is None else given] * len(outs)
        shapes = [_shape(s, f"kernel '{spec.name}': output '{p.name}' dims")
                  for p, s in zip(outs, shapes)]
        for p, s in zip(outs, shapes):
            if len(s) != p.ndim:
                raise AdjointError(f"kernel '{spec.name}': output '{p.name}' is "
                                   f"{p.describe()}, but its dims are {s}: give output_dims")
        return shapes


class _Call:
    """One call's launch: the static arguments, the launch dims and the output types."""

    def __init__(self, spec, dims, static, result):
        self.spec, self.dims, self.static, self.result = spec, dims, static, result
        self.n_in = len(static)

    def _inputs(self, traced):
        """The kernel's inputs from the callback's host values (scalars as Python numbers)."""
        values = iter(_host(traced))
        inputs = [next(values) if s is None else s for s in self.static]
        return [v.item() if isinstance(v, np.ndarray) and not p.is_array else v
                for p, v in zip(self.spec.params, inputs)]

    def _outputs(self):
        return [np.zeros(r.shape, r.dtype) for r in self.result]

    def forward(self, *traced):
        outputs = self._outputs()
        launch(self.spec, self.dims, inputs=self._inputs(traced), outputs=outputs,
               device="cpu", record_tape=False)
        return tuple(outputs)

    def backward(self, traced, outputs, cotangents):
        """Input adjoints of the float array inputs (zeros-like for the others)."""
        inputs = self._inputs(traced)
        params = self.spec.params
        adj_in = [np.zeros_like(v) if p.has_adjoint else None
                  for p, v in zip(params, inputs)]
        adj_out = [np.array(g, dtype=r.dtype, copy=True)
                   for g, r in zip(cotangents, self.result)]
        launch(self.spec, self.dims, inputs=inputs, outputs=_host(outputs),
               device="cpu", adjoint=True, adj_inputs=adj_in, adj_outputs=adj_out)
        return tuple(a for a, s in zip(adj_in, self.static) if s is None)

    def tangent(self, traced, dots):
        """The outputs' tangents along ``dots`` (one per traced input, None for those with
        no tangent)."""
        inputs, outputs = self._inputs(traced), self._outputs()
        given = {p.name: np.array(d, copy=True)
                 for p, d in zip(self._traced_params(), dots) if d is not None}
        out = launch(self.spec, self.dims, inputs=inputs, outputs=outputs, device="cpu",
                     record_tape=False, tangents=given)
        return tuple(out[p.name] for p in self.spec.params[self.n_in:])

    def _host_backward(self, *operands):
        """``backward`` on the callback's flat operands: the traced inputs, the outputs and
        their cotangents; the adjoints of the float array inputs."""
        n, m = len(self._traced_params()), len(self.result)
        adj = self.backward(operands[:n], operands[n:n + m], operands[n + m:])
        return tuple(a for p, a in zip(self._traced_params(), adj) if p.has_adjoint)

    def _need(self, part, use):
        """Refuse at trace time (not inside the callback) a derivative the kernel lacks."""
        if getattr(self.spec, part, None) is None:
            raise AdjointError(f"kernel '{self.spec.name}' has no generated {part} "
                               f"(enable_backward=False?): {use} through it needs one")

    def _refuse_scalar(self, perturbed):
        for p, moved in zip(self._traced_params(), perturbed):
            if moved and not p.is_array and p.np_dtype.kind == "f":
                raise AdjointError(f"kernel '{self.spec.name}': scalar parameter '{p.name}' "
                                   "gets no derivative from adjoint; differentiate with "
                                   "respect to an array (or pass a Python float)")

    def _traced_params(self):
        return [p for p, s in zip(self.spec.params, self.static) if s is None]

    def _run(self, fn, result, *operands):
        return jax.pure_callback(fn, result, *operands, vmap_method="sequential")

    def _primal(self, *traced):
        return self._run(self.forward, self.result, *traced)

    def vjp_function(self):
        params = self._traced_params()

        def fwd(*traced):
            self._refuse_scalar([t.perturbed for t in traced])
            self._need("backward", "jax.grad")
            values = [t.value for t in traced]
            outputs = self._primal(*values)
            return outputs, (values, outputs)

        def bwd(res, cotangents):
            values, outputs = res
            cts = [jnp.zeros(r.shape, r.dtype) if _symbolic_zero(g) else g
                   for g, r in zip(cotangents, self.result)]
            kinds = tuple(jax.ShapeDtypeStruct(np.shape(v), v.dtype)
                          for p, v in zip(params, values) if p.has_adjoint)
            adj = iter(self._run(self._host_backward, kinds, *values, *outputs, *cts))
            return tuple(next(adj) if p.has_adjoint else _zero_cotangent(v)
                         for p, v in zip(params, values))

        fn = jax.custom_vjp(self._primal)
        fn.defvjp(fwd, bwd, symbolic_zeros=True)
        return fn

    def jvp_function(self):
        params = self._traced_params()
        fn = jax.custom_jvp(self._primal)

        def rule(primals, tangents):
            self._refuse_scalar([not _symbolic_zero(t) for t in tangents])
            self._need("jvp", "jax.jvp")
            dots = [jnp.zeros(np.shape(v), v.dtype) if p.has_adjoint and _symbolic_zero(t)
                    else t for p, v, t in zip(params, primals, tangents)]
            dots = [d for p, d in zip(params, dots) if p.has_adjoint]
            m = len(primals)

            def host(*a):
                flow = iter(a[m:])
                return self.tangent(a[:m], [next(flow) if p.has_adjoint else None
                                            for p in params])
            # the outputs by a call of their own: under vmap (jax.jacfwd) only the tangents
            # are batched, and JAX wants the outputs batched as the primal function's are
            return self._primal(*primals), self._run(host, self.result, *primals, *dots)

        fn.defjvp(rule, symbolic_zeros=True)
        return fn


def _symbolic_zero(value):
    return isinstance(value, jax.custom_derivatives.SymbolicZero)


def _zero_cotangent(value):
    """The cotangent of an input adjoint gives none: float0 for integers, else zeros."""
    if np.dtype(value.dtype).kind in "iub":
        return np.zeros(np.shape(value), dtype=jax.dtypes.float0)
    return jnp.zeros(np.shape(value), value.dtype)


def jax_kernel(kernel, num_outputs=1, launch_dims=None, output_dims=None,
               differentiable="vjp"):
    """``kernel`` as a JAX function: ``f(*inputs, launch_dims=None, output_dims=None)``
    returns a tuple of its ``num_outputs`` outputs (the kernel's last parameters).

    ``launch_dims``: an int or tuple (default: the first array input's shape).
    ``output_dims``: one shape for all outputs or ``{output name: shape}`` (default: the
    launch dims). ``differentiable``: ``"vjp"`` (``jax.grad``) or ``"jvp"``
    (``jax.jvp``); see the module docstring for why not both."""
    return JaxKernel(kernel, num_outputs, launch_dims, output_dims, differentiable)
