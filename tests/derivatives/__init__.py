"""Tests of adjoint/derivatives: grad/jvp/hessian of funcs, autograd, vector mode, traces, transposes."""
