#!/usr/bin/env bash
# The GPU gate of a kernel change, on any machine with a CUDA GPU and a copy of this checkout; no network needed.
#
# Usage (from anywhere in the checkout):  tools/gpu_gate.sh OUT_DIR
#
# Steps, in this order, each under a time limit of its own. Each writes OUT_DIR/STEP.log as it runs and, when it
# ends, its verdict and the last lines of its log to OUT_DIR/summary.txt, which is printed at the end:
#   environment  the GPUs, torch, CUDA, Triton, the kernel's sha256 and the commit; stops the gate without a GPU
#   suite        ./run conformance, gated by the accepted CUDA baseline; its report in OUT_DIR/report/ and this run
#                as a candidate baseline, OUT_DIR/ulp-drift-cuda.json
#   same_cases   python -m tools.same_cases: the suite's cases against the accepted CUDA baseline's, number for number
#   vendoring    the vendored copy's bits on the GPU: python -m pytest dsv41_rope/conformance/kernel_self_tests/test_vendoring.py
#   memcheck     compute-sanitizer memcheck over python -m tools.memcheck (skipped without compute-sanitizer)
#   two_gpus     python -m tools.two_gpus (skipped with fewer than two GPUs)
#   against      the speed gate, python -m benchmarks.run --against "$PREVIOUS" (run when PREVIOUS is set)
#   bench        the benchmark run, python -m benchmarks.run (run when BENCH=1)
#
# Environment:
#   PYTHON       the python with CUDA torch and triton (default python3); ./run uses it too
#   WHEELS       a folder of wheels (e.g. .wheels, which git ignores), installed with pip --no-index into a scratch
#                folder put on PYTHONPATH when pytest, pytest-xdist, pytest-split, numpy, mpmath or hypothesis is
#                missing. Fill it on a machine with network access: pip download --only-binary=:all: -d .wheels
#                pytest pytest-xdist pytest-split mpmath hypothesis==6.170.17 (with --python-version and --platform
#                of the GPU machine's python)
#   PREVIOUS     the kernel the speed gate compares with: a git revision, or a source tools/export_kernel.sh wrote
#   BENCH        1 to end with the benchmark run
#   STEPS        the steps to run, space-separated (default: every step above that applies)
#   SUITE_ARGS   extra pytest arguments for the suite (e.g. "-k forward_bits"); same_cases then lists the cases the
#                selection left out without failing on them
#   SAME_CASES_ARGS  extra arguments for tools.same_cases (e.g. "--allow-new --moved OLD=NEW" when a change adds
#                cases or moves a test file)
#   DSV41_BASELINE  the accepted baseline (default dsv41_rope/baselines/ulp-drift-cuda.json)
#   ENVIRONMENT_SECONDS, SUITE_SECONDS, SAME_CASES_SECONDS, VENDORING_SECONDS, MEMCHECK_SECONDS, TWO_GPUS_SECONDS,
#   AGAINST_SECONDS, BENCH_SECONDS: the steps' time limits (defaults 120, 1500, 60, 300, 600, 300, 600, 600). A step
#                is sent SIGINT at its limit (pytest still writes its report and summary), and killed 30 s later.
#
# Exit status: 0 when every step that ran passed, 1 when one failed or ran out of time, 2 on a usage error.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
    usage >&2
    exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/.." || exit 2

PYTHON=${PYTHON:-python3}
export DSV41_PYTHON=$PYTHON PYTHONUNBUFFERED=1
baseline=${DSV41_BASELINE:-dsv41_rope/baselines/ulp-drift-cuda.json}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary=$out/summary.txt
: > "$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }

# step NAME SECONDS COMMAND...: runs COMMAND with its output in OUT_DIR/NAME.log, under the time limit.
step() {
    local name=$1 seconds=$2 began status verdict
    shift 2
    began=$(date +%s)
    echo "== $name (limit $seconds s)"
    echo "\$ $*" > "$out/$name.log"
    timeout -s INT -k 30 "$seconds" "$@" >> "$out/$name.log" 2>&1
    status=$?
    case $status in
        0) verdict=passed ;;
        124 | 137) verdict="ran out of time ($seconds s)" ;;
        *) verdict="failed (exit $status)" ;;
    esac
    [ "$status" -eq 0 ] || failed=1
    note "$name: $verdict in $(( $(date +%s) - began )) s"
    grep -v '^\s*$' "$out/$name.log" | tail -n "${SUMMARY_LINES:-4}" | cut -c1-300 | sed 's/^/    /' >> "$summary"
    return "$status"
}

skip() { note "$1: skipped ($2)"; }

needed="pytest, xdist, pytest_split, numpy, mpmath, hypothesis"
if ! "$PYTHON" -c "import $needed" 2>/dev/null; then
    if [ -n "${WHEELS:-}" ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$scratch/site" \
            "$WHEELS"/*.whl || { note "setup: installing the wheels of $WHEELS failed"; exit 1; }
        export PYTHONPATH=$scratch/site${PYTHONPATH:+:$PYTHONPATH}
        note "setup: installed $(ls "$WHEELS"/*.whl | wc -l) wheels of $WHEELS"
    else
        note "setup: one of $needed is missing and no WHEELS is given: ./run installs them with pip"
    fi
fi

default_steps="environment suite same_cases vendoring memcheck two_gpus"
if [ -n "${PREVIOUS:-}" ]; then default_steps+=" against"; fi
if [ "${BENCH:-0}" = 1 ]; then default_steps+=" bench"; fi
for name in ${STEPS:-$default_steps}; do
    case $name in
        environment)
            step environment "${ENVIRONMENT_SECONDS:-120}" "$PYTHON" -c '
import subprocess, torch, triton
from dsv41_rope.harness.provenance import kernel_sha256
from dsv41_rope.vendor import KERNEL_DIR
gpus = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
commit = git.stdout.strip() or "unknown (no git)"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, triton {triton.__version__}")
print(f"kernel {kernel_sha256(KERNEL_DIR)}, commit {commit}")
print("GPUs:", ", ".join(gpus) or "none")
raise SystemExit(0 if gpus else 1)' || { note "no CUDA device, or no torch and triton for it: nothing to gate"; exit 1; } ;;
        suite)
            # shellcheck disable=SC2086  # SUITE_ARGS is a list of pytest arguments
            step suite "${SUITE_SECONDS:-1500}" env DSV41_REPORT="$out/report" DSV41_BASELINE="$baseline" \
                ./run conformance -q -p no:cacheprovider -rfE --tb=short \
                --ulp-save-baseline "$out/ulp-drift-cuda.json" ${SUITE_ARGS:-} ;;
        same_cases)
            strict=--strict
            if [ -n "${SUITE_ARGS:-}" ]; then strict=; fi
            # shellcheck disable=SC2086  # SAME_CASES_ARGS is a list of arguments
            step same_cases "${SAME_CASES_SECONDS:-60}" "$PYTHON" -m tools.same_cases "$baseline" \
                "$out/report/ulp-drift.json" --label "against the accepted CUDA baseline" $strict ${SAME_CASES_ARGS:-} ;;
        vendoring)
            step vendoring "${VENDORING_SECONDS:-300}" "$PYTHON" -m pytest -q -p no:cacheprovider -rfE \
                dsv41_rope/conformance/kernel_self_tests/test_vendoring.py ;;
        memcheck)
            if command -v compute-sanitizer > /dev/null; then
                step memcheck "${MEMCHECK_SECONDS:-600}" compute-sanitizer --tool memcheck --error-exitcode 1 \
                    "$PYTHON" -m tools.memcheck
            else
                skip memcheck "no compute-sanitizer on PATH"
            fi ;;
        two_gpus)
            gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
            if [ "${gpus:-0}" -ge 2 ] 2> /dev/null; then
                step two_gpus "${TWO_GPUS_SECONDS:-300}" "$PYTHON" -m tools.two_gpus
            else
                skip two_gpus "GPUs visible: $gpus"
            fi ;;
        against)
            if [ -z "${PREVIOUS:-}" ]; then
                note "against: PREVIOUS is not set (a git revision or an exported kernel source)"
                failed=1
                continue
            fi
            seconds=${AGAINST_SECONDS:-600}
            step against "$seconds" "$PYTHON" -m benchmarks.run --against "$PREVIOUS" --out "$out/against" \
                --time-budget "$(( seconds > 120 ? seconds - 60 : seconds / 2 ))" ;;
        bench)
            seconds=${BENCH_SECONDS:-600}
            step bench "$seconds" "$PYTHON" -m benchmarks.run --out "$out/bench" \
                --time-budget "$(( seconds > 120 ? seconds - 60 : seconds / 2 ))" ;;
        *)
            note "unknown step $name (known: $default_steps against bench)"
            exit 2 ;;
    esac
done

echo
echo "== summary ($out/summary.txt)"
cat "$summary"
if [ "$failed" -ne 0 ]; then echo "gpu_gate: FAILED"; else echo "gpu_gate: passed"; fi
exit "$failed"
