#!/usr/bin/env bash
# One device-tool call that gates a kernel change on the H200 (runs 59-60): from an empty Triton cache, calibration,
# the whole suite (baseline saved), smoke and memcheck (group s); the speed gate against the previous main's kernel
# file (a1, when PREVIOUS names one, e.g. .peers/k_08ca7bb8.py from `git show main:impl/rope_triton.py`) and against
# 36b8391 (a2); the benchmark run (b); the judge, the eager reference and the four wrong implementations (j); the
# small-tensor probe (p, when PROBE=1). JUDGE=0 leaves the judge out (a change to our kernel alone: the judged
# implementations run none of its code). Each group is packed into OUT/NAME.tgz as soon as it ends (the device tool
# returns at most 8 files); OUT/summary.txt collects every group's summary. About 7 minutes on the H200.
# Usage (repository root, on the GPU machine; carry .peers and .whl):  bash scripts/h200_gate_call.sh "$OUT"
set -uo pipefail
out=${1:?usage: h200_gate_call.sh OUT_DIR}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-fresh-$$}
began=$(date +%s)
group() {  # name, then the environment and steps for h200_session.sh
    local name=$1; shift
    env "$@" bash scripts/h200_session.sh "$out/$name" $STEPS > "$out/$name.out" 2>&1
    { echo "== $name ($(( $(date +%s) - began )) s since start)"; cat "$out/$name/summary.txt" 2>/dev/null; } \
        >> "$out/summary.txt"
    mv "$out/$name.out" "$out/$name/"; tar czf "$out/$name.tgz" -C "$out" "$name" && rm -rf "${out:?}/$name"
}
mkdir -p "$out"
STEPS="calibration suite smoke sanitize" group s SUITE_SECONDS=230 SANITIZE_SECONDS=90
if [ -n "${PREVIOUS:-}" ]; then STEPS="against" group a1 AGAINST="$PREVIOUS" AGAINST_SECONDS=90; fi
STEPS="against" group a2 AGAINST=36b8391 AGAINST_SECONDS=80
STEPS="bench" group b BENCH_SECONDS=140
judged=conformance.judged.wrong  # the four wrong implementations, each of which the suite must fail
wrong="$judged:product_in_bf16 $judged:rotates_leading_channels"
wrong="$wrong $judged:backward_without_conjugate $judged:canonical_nan_copies"
if [ "${JUDGE:-1}" = 1 ]; then
    STEPS="judge" group j JUDGE_SECONDS=60 JUDGE_PASSING=impl.rope_triton:_apply_rope_torch JUDGE_IMPLS="$wrong"
fi
if [ "${PROBE:-0}" = 1 ]; then STEPS="probe" group p PROBE_SECONDS=100 PROBE_NCU_SECONDS=80; fi
ls -la "$out"
