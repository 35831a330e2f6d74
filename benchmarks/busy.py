"""``benchmarks/run.py --busy K``: every workload timed again beside K busy processes.

Laptops, notebook servers and CI runners are busy machines (issue 39): a parallel
region whose threads wait for a descheduled one can cost several times its quiet
time. With ``--busy K``, after a workload's quiet rounds, K processes that spin on a
core each (``busy``) start, the same systems are built, checked and timed again on
the same problem, and the spinners stop. For each system the table gives its quiet
and busy fwd+bwd medians and the *slowdown* (busy median / quiet median: each
system against its own quiet time), and judges adjoint against the targets: a
slowdown of at most ``MAX_SLOWDOWN``, and a busy time no worse than the hand-written
*serial* pair's under the same load (``numba-ser``).
"""
import contextlib
import statistics
import subprocess
import sys
import time

MAX_SLOWDOWN = 1.5
SPIN = "while True:\n    pass\n"


@contextlib.contextmanager
def busy(k):
    """``k`` processes spinning on a core each, for the block (killed after it)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(k)]
    try:
        time.sleep(0.3)         # (started and spinning before the first round)
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def median_ms(seconds):
    return 1e3 * statistics.median(seconds)


def rows(quiet, loaded):
    """``[(workload, system, quiet ms, busy ms, slowdown)]`` of two runs' Results
    ({workload: {system: Result}}), systems in the quiet run's order."""
    out = []
    for wl, systems in quiet.items():
        for name, r in systems.items():
            b = loaded.get(wl, {}).get(name)
            if b is not None:
                q, t = median_ms(r.fb), median_ms(b.fb)
                out.append((wl, name, q, t, t / q))
    return out


def format_table(table, k, system="adjoint", serial="numba-ser"):
    """A markdown table of ``rows``' output and a last line judging ``system``: its
    slowdown at most ``MAX_SLOWDOWN`` and its busy time at most ``serial``'s."""
    lines = [f"| workload | system | quiet fwd+bwd ms | beside {k} busy ms | slowdown |",
             "| --- | --- | ---: | ---: | ---: |"]
    busy_of = {(wl, name): t for wl, name, _, t, _ in table}
    missed = []
    for wl, name, q, t, slow in table:
        note = ""
        if name == system:
            ok = slow <= MAX_SLOWDOWN
            ser = busy_of.get((wl, serial))
            note = " ok" if ok else " MISSED"
            if not ok:
                missed.append(f"{wl}: slowdown {slow:.2f} > {MAX_SLOWDOWN}")
            if ser is not None and t > ser:
                missed.append(f"{wl}: {t:.2f} ms busy, slower than {serial}'s {ser:.2f} ms")
                note += f", slower than {serial}"
        lines.append(f"| {wl} | {name} | {q:.2f} | {t:.2f} | {slow:.2f}{note} |")
    lines.append("missed: " + "; ".join(missed) if missed else
                 f"every busy target met (slowdown <= {MAX_SLOWDOWN}, never slower than "
                 f"{serial} under the same load)")
    return "\n".join(lines)
