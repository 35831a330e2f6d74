"""The ``adjoint`` command (also ``python -m adjoint``).

    adjoint generate SRC.py [-o OUT.py]        one module for a source file
    adjoint generate A.py B.py src/ -o gen/    several files and folders
        [--target cpu|cuda]                    cuda: the numba.cuda module
    adjoint show SRC.py:NAME [--stage S|all] [--diff] [--target cpu|cuda] [--optimized]
    adjoint show SRC.py:NAME --after PASS      what one pass of the pipeline made
    adjoint passes                             the pipeline's passes, in order
    adjoint trace SRC.py:NAME --args X Y [--tangent DX DY] [--seed S] [--format F]
                                               a func's primal, tangent and adjoint
                                               traces with numbers (adjoint/derivatives/traces.py)
    adjoint trace SRC.py:KERNEL --dim N --inputs EXPR ... --outputs EXPR ... [--thread I]
                  [--tangent NAME=EXPR] [--seed S]   the same for one thread of a launch
    adjoint transpose SRC.py:NAME --args X Y [--seed S] [--format F]
    adjoint transpose SRC.py:KERNEL --dim N --inputs EXPR ... --outputs EXPR ... [--thread I]
                                               a func's (one thread's) linearized program
                                               next to its transpose, with numbers
                                               (adjoint/derivatives/transposes.py); the point: cli_point.py
    adjoint capture SRC.py:FUNCTION            record FUNCTION() on a tape and print its
                                               capture's source (runtime/capture.py)
    adjoint check OUT.py [gen/ ...] [--diff]   exit 0 if up to date, 1 if stale

Exit status: 0 success, 1 stale modules or code that cannot be differentiated,
2 wrong usage (missing files, unknown names, a file that is not a generated
module given to check, an output that would replace a file adjoint did not
generate, an output that cannot be written).
"""
import argparse
import difflib
import inspect
import sys
import textwrap

from .. import __version__
from ..api import Func, Kernel, after_source, optimization_summary, source
from .cli_point import PointError, point
from ..emit.targets import TARGETS
from ..errors import AdjointError, TransformError
from .passes import BY_NAME as PASS_NAMES
from ..derivatives.traces import PHASES, SHOWN, evaluation_trace
from ..derivatives.transposes import transpose_view
from .generate import (check, check_output, generate, generated_files, import_source, plan,
                       write_if_changed)

STAGES = ("parse", "scalarize", "normalize", "ssa", "forward", "backward", "jvp")
SAVING = ("forward_save", "backward_saved")     # kernels with stored loops; not in 'all'
USER = ("backward_user",)   # the backward as user code (forward over reverse); not in 'all'
EAGER = ("forward_vjp",)    # forward and VJP in one launch (a tape's scalar loss); not in 'all'
# --diff: the stage a stage is shown against (else the one before)
BEFORE = {"jvp": "forward", "forward_save": "forward", "backward_saved": "backward",
          "backward_user": "backward", "forward_vjp": "forward"}


def cmd_generate(args):
    pairs = plan(args.sources, args.output)
    if not pairs:
        raise UsageError("no source file with an @ad.kernel or @ad.func found")
    for src, out in pairs:
        check_output(src, out)          # before anything is written
    for src, out in pairs:
        text = generate(src, out, args.target)
        if out is None:
            sys.stdout.write(text)
        elif write_if_changed(out, text):
            print(f"wrote {out}", file=sys.stderr)
        elif not args.quiet:
            print(f"unchanged {out}", file=sys.stderr)
    return 0


def cmd_check(args):
    files = generated_files(args.modules)
    if not files:
        raise UsageError("no generated module found in " + " ".join(args.modules))
    stale = wrong = 0
    for path in files:
        result = check(path)
        if result.ok:
            if not args.quiet:
                print(f"up to date: {path}", file=sys.stderr)
            continue
        if not result.generated:
            wrong += 1
            print(f"adjoint check: error: {path}: {result.reason}", file=sys.stderr)
            continue
        stale += 1
        print(f"stale: {path}: {result.reason}", file=sys.stderr)
        if args.diff and result.diff:
            sys.stdout.write(result.diff)
    if stale:
        print(f"{stale} of {len(files) - wrong} generated module(s) stale; "
              "run `adjoint generate` to update", file=sys.stderr)
    return 2 if wrong else 1 if stale else 0


def find_object(target):
    """The kernel or func named by ``FILE.py:NAME``."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected FILE.py:NAME, got {target!r}")
    module = import_source(path)
    obj = getattr(module, name, None)
    if not isinstance(obj, (Kernel, Func)):
        known = sorted(k for k, v in vars(module).items() if isinstance(v, (Kernel, Func)))
        raise UsageError(f"{path} has no kernel or func named {name!r}; "
                         f"it has: {', '.join(known) or 'none'}")
    return obj


def stage_texts(obj, stages, target="cpu", optimized=True):
    """{stage: source} for ``stages`` of ``obj``, the forward and backward spelled for
    ``target`` (``optimized``: the code that runs; else the plain rule-by-rule code of one
    thread); 'source' is the user's code."""
    texts = {"source": textwrap.dedent(inspect.getsource(obj.pyfunc))}
    for s in stages:
        texts[s] = source(obj, s, target, optimize=True if optimized else False)
    return texts


# the stages whose code the optimization passes change
OPTIMIZED = ("forward", "backward", "jvp") + SAVING + EAGER


def _which(obj, stage, optimized):
    """The line saying which code ``show`` prints for ``stage``."""
    if stage not in OPTIMIZED:
        return ""
    if not optimized:
        part = "one thread's " if isinstance(obj, Kernel) else ""
        return (f"# {obj.name} {stage}: {part}plain rule-by-rule code (no optimization "
                "pass); --optimized: the code that runs\n")
    return f"# {obj.name} {stage}: the code that runs ({optimization_summary(obj)})\n"


def cmd_passes(args):
    from .passes import PASSES
    width = max(len(p.name) for p in PASSES)
    for p in PASSES:
        exact = "" if not p.optimization else " (exact)" if p.exact else " (rounding)"
        where = "" if p.stage == "transform" else " [emit]"
        sys.stdout.write(f"{p.name:<{width}}  {p.kind}{exact}{where}: {p.summary}\n")
    return 0


def cmd_show(args):
    obj = find_object(args.name)
    if args.after is not None:
        try:
            text = after_source(obj, args.after, args.target)
        except ValueError as e:
            raise UsageError(f"{args.name}: {e}") from None
        sys.stdout.write(text.rstrip("\n") + "\n")
        return 0
    stages = STAGES if args.stage == "all" else (args.stage,)
    if stages[-1] in SAVING + USER + EAGER:
        needed = [BEFORE[stages[-1]], stages[-1]] if args.diff else list(stages)
    else:
        needed = list(STAGES[:STAGES.index(stages[-1]) + 1]) if args.diff else list(stages)
    try:
        texts = stage_texts(obj, needed, args.target, args.optimized)
    except ValueError as e:         # a stage this kernel or func has no functions for
        raise UsageError(f"{args.name}: {e}") from None
    order = ["source"] + list(STAGES)
    out = []
    for stage in stages:
        if args.diff:
            before = BEFORE.get(stage) or order[order.index(stage) - 1]
            body = "".join(difflib.unified_diff(
                texts[before].splitlines(True), texts[stage].splitlines(True),
                fromfile=f"{obj.name} after {before}", tofile=f"{obj.name} after {stage}"))
            body = body or f"# {stage} changed nothing\n"
        else:
            body = _which(obj, stage, args.optimized) + texts[stage]
        if len(stages) > 1:
            out.append(f"# {'=' * 20} stage: {stage} {'=' * 20}\n")
        out.append(body)
        if len(stages) > 1 and stage != stages[-1]:
            out.append("\n")
    sys.stdout.write("".join(out))
    return 0


def _at_point(view, args):
    """``view`` (ad.evaluation_trace or ad.transpose_view) of the kernel or func the command
    line names, at the point its options give (adjoint/build/cli_point.py)."""
    obj = find_object(args.name)
    try:
        at = point(obj, args)
        return view(obj, *at.args, max_iterations=args.max_iterations, **at.options)
    except PointError as e:
        raise UsageError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise UsageError(f"{args.name}: {e}") from None


def cmd_trace(args):
    t = _at_point(evaluation_trace, args)
    phases = PHASES if args.replay else SHOWN
    text = {"text": t.text, "markdown": t.markdown, "html": t.html}[args.format]
    sys.stdout.write(text(phases, args.digits))
    return 0


def cmd_transpose(args):
    t = _at_point(transpose_view, args)
    sys.stdout.write(t.markdown() if args.format == "markdown" else t.text())
    return 0


def cmd_capture(args):
    path, sep, name = args.name.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected FILE.py:FUNCTION, got {args.name!r}")
    fn = getattr(import_source(path), name, None)
    if not callable(fn) or isinstance(fn, (Kernel, Func)):
        raise UsageError(f"{path} has no plain Python function named {name!r} (a function "
                         "that launches kernels, called with no arguments)")
    from ..runtime.tape import capture
    sys.stdout.write(capture(fn).source)
    return 0


class UsageError(AdjointError):
    """A command line that names missing files or objects."""


POINT_HELP = """\
a func:   --args X Y ...      one number per parameter
a kernel: --dim N [M [L]]     the launch's size (required)
          --inputs EXPR ...   then --outputs EXPR ...: one per parameter, in order; an
          --outputs EXPR ...  EXPR is Python with np, math and ad in scope: a number for a
                              scalar parameter; for an array its values
                              (np.linspace(0, 1, 8), [1, 2, 3]) or a size or shape (8,
                              '(4, 3)') giving zeros, in the parameter's dtype
          --thread I [J [K]]  the thread shown (default 0)
"""


def _point_options(p, tangent):
    """The options saying where ``trace``/``transpose`` evaluate (adjoint/build/cli_point.py)."""
    p.add_argument("--args", nargs="+", type=float, metavar="X",
                   help="a func's arguments, one number per parameter")
    p.add_argument("--dim", nargs="+", type=int, metavar="N",
                   help="a kernel's launch size (N M for 2-D)")
    p.add_argument("--inputs", nargs="+", metavar="EXPR",
                   help="a kernel's inputs, one expression per parameter")
    p.add_argument("--outputs", nargs="+", metavar="EXPR",
                   help="a kernel's outputs, one expression per parameter after the inputs")
    p.add_argument("--thread", nargs="+", type=int, metavar="I",
                   help="the kernel thread shown (default 0)")
    if tangent:
        p.add_argument("--tangent", nargs="+", metavar="DX",
                       help="the JVP's direction: a func's, one number per parameter "
                            "(default: 1 for the first float parameter, 0 for the others); "
                            "a kernel's, NAME=EXPR per input array (broadcast to its shape; "
                            "default: ones for the first float array input)")
    p.add_argument("--seed", type=float, default=1.0,
                   help="the adjoint of the result the backward starts from (a kernel: of "
                        "each element of each float output; default 1)")
    p.add_argument("--max-iterations", type=int, default=3, metavar="N",
                   help="show each loop's first N iterations and its last (default 3)")


def parser():
    p = argparse.ArgumentParser(
        prog="adjoint", description="Source-to-source reverse-mode AD for Python kernels.")
    p.add_argument("--version", action="version", version=f"adjoint {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    g = sub.add_parser("generate", help="write the forward/backward module of source files",
                       description="Write one module holding the forward/backward pair of "
                       "every kernel and func defined in each source file.")
    g.add_argument("sources", nargs="+", metavar="SRC",
                   help="source files or folders (folders need -o FOLDER)")
    g.add_argument("-o", "--output", metavar="OUT",
                   help="output file (OUT.py, one source) or folder; "
                        "standard output when omitted and there is one source file")
    g.add_argument("--target", choices=TARGETS, default="cpu",
                   help="cpu (default): numba.njit, or plain Python under ADJOINT_JIT=0; "
                        "cuda: numba.cuda.jit, launched with device='cuda'")
    g.add_argument("-q", "--quiet", action="store_true", help="do not list unchanged files")
    g.set_defaults(run=cmd_generate)

    s = sub.add_parser("show", help="print one stage of one kernel or func as Python",
                       description="Print a kernel or func after a pass of the pipeline.")
    s.add_argument("name", metavar="SRC.py:NAME")
    s.add_argument("--stage", choices=STAGES + SAVING + USER + EAGER + ("all",), default="backward",
                   help="which stage (default: backward); 'all' prints each in turn; "
                        "forward_save/backward_saved: a kernel's pair for a tape when a "
                        "loop is stored rather than replayed; backward_user: the backward "
                        "as user code, which adjoint can differentiate again")
    s.add_argument("--diff", action="store_true",
                   help="show what each stage changed, as a unified diff from the one before")
    s.add_argument("--target", choices=TARGETS, default="cpu",
                   help="spell the forward and backward stages for cpu (default) or cuda")
    s.add_argument("--optimized", action="store_true",
                   help="the code that runs (every function, the optimization passes "
                        "applied); by default one thread's plain rule-by-rule code")
    s.add_argument("--after", metavar="PASS", choices=PASS_NAMES,
                   help="what pass PASS made (`adjoint passes` lists them), the passes before "
                        "it run as they run for this kernel or func")
    s.set_defaults(run=cmd_show)

    ps = sub.add_parser("passes", help="list the pipeline's passes in order",
                        description="The passes of the pipeline in the order they run: core "
                        "passes define the derivative; optimization passes only make code "
                        "faster (ADJOINT_OPTIMIZE=0, or -NAME, turns them off).")
    ps.set_defaults(run=cmd_passes)

    t = sub.add_parser("trace", help="a func's or one kernel thread's evaluation trace",
                       description="Run the plain (unoptimized) generated forward, JVP and "
                       "backward of a func on the given arguments, or of a kernel launched "
                       "on the given arrays, and print each value they assign (a kernel: "
                       "one thread's), line by line: the primal, tangent and adjoint traces.",
                       epilog=POINT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("name", metavar="SRC.py:NAME")
    _point_options(t, tangent=True)
    t.add_argument("--format", choices=("text", "markdown", "html"), default="text")
    t.add_argument("--digits", type=int, default=6, help="significant digits (default 6)")
    t.add_argument("--replay", action="store_true",
                   help="also the values the backward recomputes and stores")
    t.set_defaults(run=cmd_trace)

    tp = sub.add_parser("transpose", help="a func's or one kernel thread's linearized "
                        "program and its transpose",
                        description="Show the JVP of a func (or of one thread of a kernel's "
                        "launch) with the primal values fixed (a linear program) next to its "
                        "transpose, one adj_ line per term, both from the rule table, and the "
                        "transpose run bottom up.",
                        epilog=POINT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    tp.add_argument("name", metavar="SRC.py:NAME")
    _point_options(tp, tangent=False)
    tp.add_argument("--format", choices=("text", "markdown"), default="text")
    tp.set_defaults(run=cmd_transpose)

    cp = sub.add_parser("capture", help="the source of a capture of a function's launches",
                        description="Call FUNCTION() (no arguments) on a new tape and print "
                        "the source of its capture: the recorded launches and copies as one "
                        "forward and one backward function (tape.capture()).")
    cp.add_argument("name", metavar="SRC.py:FUNCTION")
    cp.set_defaults(run=cmd_capture)

    c = sub.add_parser("check", help="exit non-zero if generated modules are stale",
                       description="Check that generated modules are up to date with their "
                       "sources (exit 0), or name each stale one and why (exit 1).")
    c.add_argument("modules", nargs="+", metavar="OUT",
                   help="generated modules, or folders holding them")
    c.add_argument("--diff", action="store_true", help="print what regenerating would change")
    c.add_argument("-q", "--quiet", action="store_true", help="print only stale modules")
    c.set_defaults(run=cmd_check)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as e:
        print(f"adjoint {args.command}: error: {e}", file=sys.stderr)
        return 2
    except TransformError as e:
        print(f"adjoint {args.command}: {e}", file=sys.stderr)
        return 1
    except AdjointError as e:
        print(f"adjoint {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
