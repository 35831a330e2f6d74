"""The five benchmark workloads, in the order they are reported."""
import importlib

ORDER = ["elementwise", "springs", "nbody", "stencil", "dense"]


def load(name):
    return importlib.import_module(f"benchmarks.workloads.{name}")


def cuda_systems(name):
    """The workload's GPU systems (their module imports numba.cuda: only when asked)."""
    return importlib.import_module(f"benchmarks.workloads.gpu_{name}").CUDA_SYSTEMS


def all_workloads():
    return [load(n) for n in ORDER]
