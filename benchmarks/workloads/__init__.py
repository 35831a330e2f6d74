"""The benchmark workloads, in the order they are reported: the five tuned ones,
then the same five as a user writes them (``<name>-user``, see ``user.py``)."""
import importlib

ORDER = ["elementwise", "springs", "nbody", "stencil", "dense"]
USER_ORDER = [f"{n}-user" for n in ORDER]
ALL = ORDER + USER_ORDER


def load(name):
    """A workload: a module of this package, or the user form of one (``<name>-user``)."""
    if name.endswith("-user"):
        forms = importlib.import_module("benchmarks.workloads.user").FORMS
        return forms[name[:-len("-user")]]()
    return importlib.import_module(f"benchmarks.workloads.{name}")


def cuda_systems(name):
    """The workload's GPU systems (their module imports numba.cuda: only when asked)."""
    return importlib.import_module(f"benchmarks.workloads.gpu_{name}").CUDA_SYSTEMS


def all_workloads():
    return [load(n) for n in ORDER]
