"""Render a ``run.py --json`` file as the markdown used in docs/benchmarks.md.

    python benchmarks/run.py --json bench.json && python benchmarks/report.py bench.json
"""
import json
import statistics
import sys

BASELINE = "numba-par"      # of reports written before run.py recorded its baseline


def paired(a, b):
    return statistics.median(x / y for x, y in zip(a, b))


def bounds_check_cost(samples):
    """Markdown rows: adjoint (bounds checks on, the default) over adjoint-unchecked
    (``bounds_check=False``), paired per round. ``samples``: {workload: {system:
    (forward seconds, fwd+bwd seconds)}}; no rows when either system is missing."""
    lines = ["| workload | bounds checks: forward, checked / unchecked | "
             "fwd+bwd, checked / unchecked |", "| --- | ---: | ---: |"]
    for wl, systems in samples.items():
        if "adjoint" in systems and "adjoint-unchecked" in systems:
            (f1, b1), (f0, b0) = systems["adjoint"], systems["adjoint-unchecked"]
            lines.append(f"| {wl} | {paired(f1, f0):.3f}x | {paired(b1, b0):.3f}x |")
    return lines if len(lines) > 2 else []


def _bwd(s):
    """The backward column: measured, or ``~`` fwd+bwd minus fwd of the same round (also
    for a report written before the backward was recorded)."""
    if s.get("bwd_s"):
        return f"{'' if s.get('bwd_measured') else '~'}{1e3 * statistics.median(s['bwd_s']):.2f}"
    return f"~{1e3 * statistics.median(b - f for b, f in zip(s['fwd_bwd_s'], s['fwd_s'])):.2f}"


def render(rep):
    m, rev = rep["machine"], rep["adjoint"]
    baseline = rep.get("baseline", BASELINE)
    gpu = f" GPU: {m['gpu']}." if m.get("gpu") else ""
    lines = [
        f"Measured {rep['date'][:10]} at adjoint commit `{rev['commit'].split()[0][:12]}`"
        + (" (with uncommitted changes)" if rev.get("dirty") else "") + ".",
        "",
        f"Machine: {m['cpu']}, {m['logical_cores']} logical cores, numba {m['numba']} "
        f"({m['numba_threads']} threads), numpy {m['numpy']}, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in rep["versions"].items()
                    if k != "adjoint" and not str(v).startswith(("jax not", "warp not")))
        + f". Load average {m.get('loadavg_start', 0):.1f} at start, "
        f"{m.get('loadavg_end', 0):.1f} at end. float32, {rep['size']} sizes, medians of "
        f"{rep['repeat']} rounds after {rep['warmup']} warm-up runs.{gpu}",
        "",
        f"| workload | system | forward ms | backward ms | fwd+bwd ms | (fwd+bwd)/fwd | jvp ms "
        f"| jvp/fwd | fwd+bwd vs {baseline} | fwd+bwd min..max ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for wl, d in rep["workloads"].items():
        systems = d["systems"]
        base = systems.get(baseline)
        for name, s in systems.items():
            ratio = f"{paired(s['fwd_bwd_s'], base['fwd_bwd_s']):.2f}x" if base else "n/a"
            bold = "**" if name == "adjoint" else ""
            jvp = (f"{s['jvp_ms_median']:.2f} | {paired(s['jvp_s'], s['jvp_fwd_s']):.2f}"
                   if s.get("jvp_s") else "| ")
            lines.append(f"| {wl} | {bold}{name}{bold} | {s['fwd_ms_median']:.2f} | {_bwd(s)} | "
                         f"{s['fwd_bwd_ms_median']:.2f} | {paired(s['fwd_bwd_s'], s['fwd_s']):.2f} | "
                         f"{jvp} | {ratio} | {1e3 * min(s['fwd_bwd_s']):.2f}.."
                         f"{1e3 * max(s['fwd_bwd_s']):.2f} |")
    checks = bounds_check_cost({wl: {n: (s["fwd_s"], s["fwd_bwd_s"]) for n, s in d["systems"].items()}
                                for wl, d in rep["workloads"].items()})
    if checks:
        lines += ["", "What the bounds checks cost (adjoint, checked by default, over "
                  "adjoint-unchecked, `@ad.kernel(bounds_check=False)`; medians of per-round "
                  "ratios):", ""] + checks
    notes = [(wl, n, s["note"]) for wl, d in rep["workloads"].items()
             for n, s in d["systems"].items() if s.get("note")]
    if notes:
        lines.append("")
        lines += [f"- {wl} / {n}: {note}" for wl, n, note in notes]
    if rep.get("targets"):
        lines += ["", "Issue 14's targets for adjoint (medians of per-round ratios):", ""]
        lines += rep["targets"].splitlines()
    lo = rep.get("launch_overhead")
    if lo:
        lines += ["", f"Launch overhead (tape of {lo['n_launches']} launches of a "
                  f"{lo['elements_per_launch']}-element kernel, µs per launch):", "",
                  "| | launch | on a tape | backward |", "| --- | ---: | ---: | ---: |",
                  f"| adjoint | {lo['adjoint_launch_no_tape_us']:.1f} | "
                  f"{lo['adjoint_launch_on_tape_us']:.1f} | {lo['adjoint_backward_per_launch_us']:.1f} |",
                  f"| numba (direct call of a compiled serial function) | {lo['numba_direct_call_us']:.1f} | | |"]
        if lo.get("adjoint_captured_forward_us") is not None:
            lines.append(f"| adjoint, the tape captured (one call each way) | | "
                         f"{lo['adjoint_captured_forward_us']:.1f} | "
                         f"{lo['adjoint_captured_backward_us']:.1f} |")
        if lo.get("adjoint_compiled_forward_call_us") is not None:
            lines.append(f"| adjoint's compiled forward called directly (no launch, no tape) | "
                         f"{lo['adjoint_compiled_forward_call_us']:.1f} | | |")
        if "warp_launch_on_tape_us" in lo:
            lines.append(f"| warp | | {lo['warp_launch_on_tape_us']:.1f} | "
                         f"{lo['warp_backward_per_launch_us']:.1f} |")
    cw = rep.get("cold_warm")
    if cw:
        lines += ["", "Time to the first gradient in a fresh process (tiny instance; process "
                  "wall time, interpreter start and imports included):", "",
                  "| workload | cold (empty caches) | warm (generated module + numba cache on disk) "
                  "| numba compiling in the cold run, per function |",
                  "| --- | ---: | ---: | --- |"]
        lines += [f"| {wl if wl != 'numba-floor' else 'floor: one cached hand-written njit function'} "
                  f"| {r['cold']['process_wall_s']:.2f} s | {r['warm']['process_wall_s']:.2f} s | "
                  f"{_compiled(r['cold'])} |" for wl, r in cw.items()]
    skipped = {k: v for k, v in rep.get("skipped", {}).items()}
    if skipped:
        lines += [""] + [f"Skipped: {k} ({v})." for k, v in skipped.items()]
    return "\n".join(lines)


def _compiled(run):
    per = run.get("compile_s")
    if per is None:
        return "n/a"
    return ", ".join(f"{n} {t:.2f} s" for n, t in sorted(per.items(), key=lambda kv: -kv[1])) or "-"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python benchmarks/report.py RESULTS.json")
    with open(argv[0]) as fh:
        print(render(json.load(fh)))


if __name__ == "__main__":
    main()
