#!/usr/bin/env bash
# One device-tool call on the H200: parity, the full conformance suite with its report and baseline, benchmarks.
# Usage (repository root, on the GPU machine):
#   bash scripts/h200_session.sh OUT_DIR [contraction|parity|suite|sanitize|bench|candidates|sweep ...]
# Wheels for pytest/pytest-xdist travel in .whl (the machine has no network): scripts/fetch_gpu_wheels.sh makes it.
set -uo pipefail
out=${1:?usage: h200_session.sh OUT_DIR [steps]}; shift
steps=${*:-contraction parity suite sanitize bench}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
python3 - <<'PY' | tee "$out/versions.txt"
import torch, triton
print("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
PY
status=0
for step in $steps; do
    start=$(date +%s)
    case "$step" in
        contraction) python3 scripts/eager_contraction_probe.py --out "$out" > "$out/contraction.log" 2>&1 || status=1
                     grep -E "model_misses\": [1-9]|SUMMARY" "$out/contraction.log" | head -30 ;;
        parity) python3 scripts/gpu_parity.py --out "$out" > "$out/parity.log" 2>&1 || status=1
                grep -E "SUMMARY|fused_over_clone" "$out/parity.log" ;;
        # SIGINT well inside the device tool's 10-minute limit: pytest then still prints its failure summary and
        # the plugin still writes the report, so a slow run is diagnosable rather than cut off.
        # The README's command (./run conformance: 8 workers a GPU, gated by baselines/ulp-drift-cuda.json).
        suite) DSV41_REPORT="$out/report" timeout -s INT "${SUITE_SECONDS:-420}" ./run conformance -q \
                   -p no:cacheprovider -rfE --tb=short --ulp-save-baseline "$out/ulp-drift-cuda.json" \
                   --junitxml "$out/junit.xml" > "$out/suite.log" 2>&1 || status=1
               grep -E "^(FAILED|ERROR)" "$out/suite.log" | cut -c1-300 | head -40
               grep -vE "^SKIPPED|^FAILED|^ERROR|^\.|^$|^[sF.E]+ +\[" "$out/suite.log" | tail -40 ;;
        sanitize) timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_probe.py \
                      > "$out/sanitize.log" 2>&1 || status=1
                  tail -5 "$out/sanitize.log" ;;
        candidates) timeout 300 python3 -m benchmarks.candidates --out "$out" > "$out/candidates.log" 2>&1 || status=1
                    tail -12 "$out/candidates.log" ;;
        sweep) timeout "${SWEEP_SECONDS:-330}" python3 -m benchmarks.sweep --out "$out" \
                   --time-budget "$(( ${SWEEP_SECONDS:-330} - 30 ))" > "$out/sweep.log" 2>&1 || status=1
               tail -45 "$out/sweep.log" ;;
        bench) timeout 400 python3 -m benchmarks.run --out "$out/bench" --time-budget 300 > "$out/bench.log" 2>&1 || status=1
               tail -40 "$out/bench.log" ;;
        *) echo "unknown step $step"; status=2 ;;
    esac
    echo "step $step: $(( $(date +%s) - start )) s, status so far $status"
done
exit $status
