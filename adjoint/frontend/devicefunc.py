"""What the frontend knows of a device function (an ``@ad.func``).

``adjoint.api.Func`` derives from ``DeviceFunction``, so the parser can tell a
call to a device function from any other call without importing the API that
drives it (the API imports the transformer, which imports the parser). This
module imports nothing, so ``import adjoint`` does not load gast through it.
"""


class DeviceFunction:
    """Base of ``adjoint.api.Func``. The transformer reads these attributes of a
    device function it calls: ``name`` (the generated function's name),
    ``pyfunc`` (the user's function), ``custom_grad`` (a hand-written adjoint or
    ``None``) and ``transformed`` (the function after every pass)."""
