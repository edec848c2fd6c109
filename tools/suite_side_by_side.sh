#!/usr/bin/env bash
# The GPU suite's wall time, this checkout's against another's, in turn on one machine, with a warm Triton cache:
# a first round builds both checkouts' kernels (its times are printed apart), the next rounds are timed.
#
# Usage:  tools/suite_side_by_side.sh OTHER_CHECKOUT OUT_DIR [ROUNDS]     (ROUNDS timed rounds, default 1)
#         WARM=0 skips the first round (the cache is warm already: both suites ran on this machine before)
#
# Each run is `./run conformance -q -p no:cacheprovider` of its checkout (PYTHON names the python with CUDA torch, as
# for tools/gpu_gate.sh), its log in OUT_DIR/<label>-<round>.log; OUT_DIR/side-by-side.txt gets one line a run:
# label, round, seconds, and pytest's last line. Exit status 0 when every run passed, 1 otherwise, 2 on bad usage.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
if [ $# -lt 2 ] || [ $# -gt 3 ] || [ ! -x "$1/run" ]; then
    usage >&2
    exit 2
fi
other=$(cd "$1" && pwd)
mkdir -p "$2" || exit 2
out=$(cd "$2" && pwd)
rounds=${3:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
export DSV41_PYTHON=${PYTHON:-python3} PYTHONUNBUFFERED=1
summary=$out/side-by-side.txt
failed=0

run_one() {  # run_one LABEL CHECKOUT ROUND
    local began status milliseconds last
    began=$(date +%s%N)
    (cd "$2" && DSV41_REPORT="$out/report-$1-$3" ./run conformance -q -p no:cacheprovider) > "$out/$1-$3.log" 2>&1
    status=$?
    milliseconds=$(( ($(date +%s%N) - began) / 1000000 ))
    last=$(grep -E "passed|failed" "$out/$1-$3.log" | tail -n 1)
    [ "$status" -eq 0 ] || failed=1
    printf '%-6s round %-7s %4d.%01d s  exit %s  %s\n' "$1" "$3" $((milliseconds / 1000)) $((milliseconds % 1000 / 100)) \
        "$status" "$last" | tee -a "$summary"
}

: > "$summary"
echo "this: $(git -C "$here" rev-parse --short=12 HEAD), other: $(git -C "$other" rev-parse --short=12 HEAD 2>/dev/null \
    || echo "$other")" | tee -a "$summary"
first=1
if [ "${WARM:-1}" = 0 ]; then first=0; fi
if [ "$first" = 1 ]; then
    run_one other "$other" warm-up
    run_one this "$here" warm-up
fi
for round in $(seq 1 "$rounds"); do
    run_one other "$other" "$round"
    run_one this "$here" "$round"
done
exit "$failed"
