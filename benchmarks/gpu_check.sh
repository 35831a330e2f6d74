#!/usr/bin/env bash
# Issue 43: the CUDA backend's first run on GPU hardware, in one command of under
# 7.5 minutes (the whole device budget is about 15, the machine's start included).
#
#   bash benchmarks/gpu_check.sh [OUTDIR]        # OUTDIR: default $OUT, else benchmarks/results/gpu
#
# Phases, each under `timeout` inside one overall deadline (GPU_CHECK_BUDGET seconds,
# default 440), logs written as they go so a phase that is cut short keeps its output:
#   env.txt       nvidia-smi, versions, numba.cuda.detect(), where NVVM was found
#   (preflight)   one numba.cuda kernel and one adjoint kernel compiled and run; if that
#                 fails, again with CUDA_HOME=/usr/local/cuda, then with the NVVM carried
#                 in .whl/nvvm-*.tar.xz (benchmarks/gpu_wheels.sh makes it)
#   interop.log   benchmarks/gpu_interop.py: zero-copy torch/CuPy, gradients through torch
#                 CUDA tensors vs float64 finite differences, loop_capacity's error
#   bench.log     benchmarks/run.py --device cuda --keep-going: adjoint vs the hand-written
#   bench.json    numba.cuda pair and JAX on the GPU (full sizes unless GPU_CHECK_BENCH says
#                 otherwise; a system whose check fails is named and the others still timed)
#   tests.log     python -m pytest -k cuda on the GPU (no -x: every failure, with its
#   junit.xml     reason; -v so a run cut short still names what passed and failed)
#   summary.txt   each phase's exit status and time, the failures, the tables
#
# On the GPU machine (no network; gast, astor and a numpy numba-cuda works with travel as
# wheels in .whl, carried):
#   NUMBA_ENABLE_CUDASIM=0 bash benchmarks/gpu_check.sh "$OUT"
# Only some tests again, without the benchmarks and the interop checks:
#   NUMBA_ENABLE_CUDASIM=0 GPU_CHECK_SKIP_BENCH=1 GPU_CHECK_SKIP_INTEROP=1 \
#     GPU_CHECK_TESTS=@benchmarks/gpu_rerun.txt bash benchmarks/gpu_check.sh "$OUT"
# Here, in numba's simulator, with a small selection (the default is all of -k cuda):
#   NUMBA_ENABLE_CUDASIM=1 GPU_CHECK_K="cuda and test_cuda" GPU_CHECK_WORKERS=2 \
#     GPU_CHECK_BENCH="--micro --repeat 1 --warmup 0" bash benchmarks/gpu_check.sh /tmp/gpucheck_sim
#
# Knobs: GPU_CHECK_K (pytest -k, default "cuda"), GPU_CHECK_TESTS (pytest node ids,
# separated by blanks, or @FILE: one a line, # comments; instead of -k unless GPU_CHECK_K
# is given too), GPU_CHECK_SKIP_BENCH=1 and GPU_CHECK_SKIP_INTEROP=1 (leave those phases
# out), GPU_CHECK_WORKERS (pytest -n, default 16), GPU_CHECK_TEST_TIMEOUT (per test,
# default 180 s), GPU_CHECK_BENCH (extra run.py arguments, default "--repeat 10"),
# GPU_CHECK_BUDGET (default 440 s), GPU_CHECK_INSTALL (1: install the carried wheels and
# the project into the interpreter's site-packages; default 1 outside the simulator, 0 in
# it, where the wheels go to /tmp/site on PYTHONPATH only if gast or astor is missing),
# PYTHON (python3).
set -u
set -o pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
OUTDIR=${1:-${OUT:-benchmarks/results/gpu}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
PY=${PYTHON:-python3}
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-440}
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"

export NUMBA_ENABLE_CUDASIM=${NUMBA_ENABLE_CUDASIM:-0}
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false     # JAX takes GPU memory as it needs it
export ADJOINT_TEST_PTX=0    # conftest's PTX pass re-compiles ~2,000 kernels: the tests compile theirs for real
export ADJOINT_TEST_LEVELS=0  # tests/levels.py's reruns are on the python backend: nothing for the GPU
export ADJOINT_CACHE_DIR=${ADJOINT_CACHE_DIR:-/tmp/adjoint-gpu-check-cache}

note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# seconds a phase may take: at most $1, and $2 kept back for the phases after it
allow() {
    local left=$(( T0 + BUDGET - $(date +%s) - $2 ))
    (( left > $1 )) && left=$1
    (( left < 10 )) && left=10
    echo "$left"
}
phase() {   # phase NAME SECONDS LOG CMD...: run CMD under timeout, log to LOG and stdout
    local name=$1 secs=$2 log=$3 start rc
    shift 3
    start=$(date +%s)
    echo "=== $name (at most ${secs} s; ${start}s since epoch, $(elapsed) s into the check)" | tee -a "$log"
    timeout -s INT -k 15 "$secs" "$@" 2>&1 | tee -a "$log"
    rc=$?
    (( rc == 124 || rc == 130 )) && echo "=== $name: TIMED OUT after ${secs} s" | tee -a "$log"
    note "phase $name: exit $rc in $(( $(date +%s) - start )) s"
    return $rc
}

if [ -f "$ROOT/COMMIT" ]; then      # a `git archive` export (see docs/benchmarks.md)
    REV="$(cat "$ROOT/COMMIT") (exported tree)"
else
    REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && REV="$REV (+ uncommitted changes)"
fi
note "gpu_check.sh at $REV, NUMBA_ENABLE_CUDASIM=$NUMBA_ENABLE_CUDASIM, output in $OUTDIR"
# the carried wheels: .whl in this tree, or beside it (a tree exported into .clean/)
WHL=${GPU_CHECK_WHEELS:-}
for d in "$ROOT/.whl" "$ROOT/../.whl"; do
    [ -z "$WHL" ] && [ -d "$d" ] && WHL=$(cd "$d" && pwd)
done

# -- the carried wheels: the GPU machine has no network -------------------------------
# gast and astor (adjoint needs them), numpy 2.4 (numba-cuda 0.30 fails on numpy 2.5:
# np.row_stack is gone). Outside the simulator they go into the interpreter's own
# site-packages, and so does the project (editable), so that child processes see them
# too: tests start python with an environment of their own (PYTHONPATH=the repository),
# which a --target folder on PYTHONPATH would not reach. The machine is thrown away after.
INSTALL=${GPU_CHECK_INSTALL:-$([ "$NUMBA_ENABLE_CUDASIM" = 0 ] && echo 1 || echo 0)}
to_target() {   # the old way: a folder on PYTHONPATH (this process and its plain children)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$@" || note "pip install --target /tmp/site of $* failed"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
if [ "$INSTALL" = 1 ] && [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
    SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if $PY -m pip install -q --no-index --no-deps --no-cache-dir --no-compile "$WHL"/*.whl; then
        note "installed into $SITE: $(cd "$WHL" && echo *.whl)"
    else
        note "pip install of $WHL/*.whl into $SITE failed: into /tmp/site on PYTHONPATH instead"
        to_target "$WHL"/*.whl
    fi
elif ! $PY -c "import gast, astor" 2>/dev/null; then
    if [ -n "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
        to_target "$WHL"/*.whl
    else
        note "gast/astor missing and no .whl/*.whl: run benchmarks/gpu_wheels.sh here first"
    fi
fi
if [ "$INSTALL" = 1 ]; then
    # the project itself, for child processes started from another folder
    where() { (cd / && $PY -c "import os, adjoint; print(os.path.dirname(os.path.dirname(os.path.abspath(adjoint.__file__))))" 2>/dev/null); }
    if [ "$(where)" != "$ROOT" ]; then
        $PY -m pip install -q --no-index --no-deps --no-build-isolation -e "$ROOT" >/dev/null 2>&1 ||
            echo "$ROOT" > "$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/adjoint-gpu-check.pth" ||
            note "could not make $ROOT importable from site-packages"
        [ "$(where)" = "$ROOT" ] && note "adjoint importable from any folder: $ROOT" ||
            note "adjoint from another folder: '$(where)', not $ROOT (PYTHONPATH only)"
    fi
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

# -- environment ----------------------------------------------------------------------
ENV=$OUTDIR/env.txt
{
    echo "date: $(date -Is)   host: $(cat /proc/sys/kernel/hostname 2>/dev/null)   $(uname -srm)   nproc: $(nproc)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
            --format=csv 2>&1 || nvidia-smi -L 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    for d in /usr/local/cuda /usr/local/cuda-*; do
        [ -d "$d" ] && echo "toolkit: $d $( [ -d "$d/nvvm/lib64" ] && echo '(has nvvm)')"
    done
    command -v nvcc >/dev/null && nvcc --version | tail -2
} > "$ENV" 2>&1
cat "$ENV"
phase env "$(allow 60 380)" "$ENV" $PY benchmarks/gpu_interop.py --env
GPU_NAME=$(grep -m1 -A1 '^name, driver' "$ENV" | tail -1)
note "gpu: ${GPU_NAME:-(nvidia-smi gave nothing)}"

# -- preflight: can numba compile and launch at all? (else try another NVVM) -----------
# (exit 1: numba's own kernel failed, so another NVVM may help; 3: adjoint's alone failed)
PRE=$OUTDIR/env.txt
phase preflight "$(allow 60 360)" "$PRE" $PY benchmarks/gpu_interop.py --preflight
PRE_RC=$?
if (( PRE_RC == 1 )) && [ "$NUMBA_ENABLE_CUDASIM" = 0 ] && [ -z "${CUDA_HOME:-}" ]; then
    if [ -d /usr/local/cuda/nvvm/lib64 ]; then
        export CUDA_HOME=/usr/local/cuda
        phase preflight-cuda-home "$(allow 60 340)" "$PRE" $PY benchmarks/gpu_interop.py --preflight
        PRE_RC=$?
        (( PRE_RC == 1 )) && unset CUDA_HOME
    fi
    if (( PRE_RC == 1 )) && [ -n "$WHL" ] && ls "$WHL"/nvvm-*.tar.xz >/dev/null 2>&1; then
        mkdir -p /tmp/nvvm-fallback
        $PY -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], **({'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}))" \
            "$(ls "$WHL"/nvvm-*.tar.xz | head -1)" /tmp/nvvm-fallback
        export CUDA_HOME=/tmp/nvvm-fallback
        phase preflight-carried-nvvm "$(allow 60 320)" "$PRE" $PY benchmarks/gpu_interop.py --preflight
        PRE_RC=$?
        (( PRE_RC == 1 )) && unset CUDA_HOME
    fi
fi
(( PRE_RC != 0 )) && note "PREFLIGHT FAILED (exit $PRE_RC; see env.txt): what follows may fail the same way"
note "CUDA_HOME=${CUDA_HOME:-(unset)}"

# -- interop and loop_capacity on the GPU --------------------------------------------
if [ "${GPU_CHECK_SKIP_INTEROP:-0}" = 1 ]; then
    note "phase interop: skipped (GPU_CHECK_SKIP_INTEROP=1)"
else
    phase interop "$(allow 90 330)" "$OUTDIR/interop.log" $PY benchmarks/gpu_interop.py
    grep -E '^(PASS|FAIL|SKIP|UNSUPPORTED) ' "$OUTDIR/interop.log" >> "$SUMMARY"
fi

# -- benchmarks: adjoint vs the hand-written numba.cuda pair and JAX on the GPU --------
# (full sizes take about a minute on a GPU; the simulator needs --micro)
if [ "${GPU_CHECK_SKIP_BENCH:-0}" = 1 ]; then
    note "phase bench: skipped (GPU_CHECK_SKIP_BENCH=1)"
else
    read -r -a BENCH_ARGS <<< "${GPU_CHECK_BENCH:---repeat 10}"
    phase bench "$(allow 150 240)" "$OUTDIR/bench.log" $PY benchmarks/run.py --device cuda \
        --systems "${GPU_CHECK_SYSTEMS:-adjoint,adjoint-unchecked,numba-cuda,jax}" --keep-going \
        --json "$OUTDIR/bench.json" "${BENCH_ARGS[@]}"
    # where a round's time goes: launches, copies and waits of adjoint and of the pair
    phase profile "$(allow 90 200)" "$OUTDIR/profile.md" $PY benchmarks/gpu_profile.py \
        ${GPU_CHECK_PROFILE:-}
fi

# -- the test suite's CUDA selection on the GPU --------------------------------------
PYTEST_ARGS=(-v -rfE --tb=short -p no:cacheprovider --junitxml="$OUTDIR/junit.xml")
TESTS=${GPU_CHECK_TESTS:-}
if [ "${TESTS:0:1}" = @ ]; then      # @FILE: node ids one a line, blank lines and # comments
    TESTS=$(sed -e 's/#.*//' "${TESTS:1}" | tr -s ' \t\n' ' ') || note "GPU_CHECK_TESTS: cannot read ${TESTS:1}"
fi
read -r -a TEST_IDS <<< "$TESTS"
if (( ${#TEST_IDS[@]} )); then
    note "tests: ${#TEST_IDS[@]} node ids (GPU_CHECK_TESTS)${GPU_CHECK_K:+, -k $GPU_CHECK_K}"
    PYTEST_ARGS+=("${TEST_IDS[@]}")
    [ -n "${GPU_CHECK_K:-}" ] && PYTEST_ARGS+=(-k "$GPU_CHECK_K")
else
    PYTEST_ARGS+=(-k "${GPU_CHECK_K:-cuda}")
fi
if $PY -c "import xdist" 2>/dev/null; then
    # worksteal hands each worker a contiguous run of tests (the kernels of one file or
    # rule group compile in one worker, not in all 16), stealing from the end when idle
    DIST=loadfile
    $PY -c "from xdist.scheduler import WorkStealingScheduling" 2>/dev/null && DIST=worksteal
    PYTEST_ARGS+=(-n "${GPU_CHECK_WORKERS:-16}" --dist "$DIST")
fi
if $PY -c "import pytest_timeout" 2>/dev/null; then
    PYTEST_ARGS+=(--timeout="${GPU_CHECK_TEST_TIMEOUT:-180}")
fi
phase tests "$(allow 600 15)" "$OUTDIR/tests.log" $PY -m pytest "${PYTEST_ARGS[@]}" \
    | grep --line-buffered -E '^\[gw[0-9]+\] .*(FAILED|ERROR)|^(FAILED|ERROR) |Timeout|TIMED OUT|^=+ ' \
    | awk '{ if (n < 120) print; n++; fflush() }'

# -- summary: the compact part first, then every failure ------------------------------
FAILURES=$(mktemp)
{
    echo "--- tests: $(grep -E '^=+ .*[0-9]+ (passed|failed|errors?|skipped|deselected)' "$OUTDIR/tests.log" | tail -1)"
    $PY - "$OUTDIR/junit.xml" "$FAILURES" <<'EOF'
import collections, sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as exc:
    print(f"junit.xml: not readable ({exc})")
    sys.exit(0)
cases = list(root.iter("testcase"))
bad = [(c, k) for c in cases for k in ("failure", "error") if c.find(k) is not None]
skipped = sum(c.find("skipped") is not None for c in cases)
print(f"junit: {len(cases)} test cases, {len(bad)} failed or errored, {skipped} skipped")
if bad:
    by_file = collections.Counter(c.get("classname") for c, _ in bad)
    print("failed or errored, by module: " + ", ".join(f"{m} {n}" for m, n in by_file.most_common()))
with open(sys.argv[2], "w") as fh:
    for c, k in bad:
        msg = (c.find(k).get("message") or "").replace("\n", " ")[:160]
        fh.write(f"  {k.upper():7} {c.get('classname')}::{c.get('name')}: {msg}\n")
EOF
    if [ -f "$OUTDIR/bench.log" ]; then
        echo "--- bench:"
        grep -E '^\| ' "$OUTDIR/bench.log" | head -40
        grep -E "^(SKIPPED|FAILED) |CHECK FAILED|Aborting|^gpu:|TIMED OUT" "$OUTDIR/bench.log" | awk '!seen[$0]++'
    fi
    if [ -s "$FAILURES" ]; then
        echo "--- every failed or errored test (junit.xml has the details, tests.log the tracebacks):"
        cat "$FAILURES"
    fi
} >> "$SUMMARY" 2>&1
rm -f "$FAILURES"
echo "=================== summary ($(elapsed) s in all; all of it in summary.txt) ==================="
awk '/^--- every failed/ { f = 1 } { if (!f || n++ < 40) print }' "$SUMMARY"
ls -la "$OUTDIR"
