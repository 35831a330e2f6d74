"""The five benchmark workloads, in the order they are reported."""
import importlib

ORDER = ["elementwise", "springs", "nbody", "stencil", "dense"]


def load(name):
    return importlib.import_module(f"benchmarks.workloads.{name}")


def all_workloads():
    return [load(n) for n in ORDER]
