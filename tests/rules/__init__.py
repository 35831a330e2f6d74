"""Tests of adjoint/rules: every rule against finite differences, the rule table against the runtime builtins, casts and integers."""
