#!/usr/bin/env bash
# One device-tool call on the H200: calibration, the full conformance suite with its report and baseline,
# compute-sanitizer memcheck, benchmarks and the launch sweep, the suite as merged shards and its wall time against the
# number of xdist workers, each under its own time limit.
# Usage (repository root, on the GPU machine):
#   bash scripts/h200_session.sh OUT_DIR [calibration|smoke|suite|profile|sanitize|bench|against|stages|ncu|ceiling|sweep|probe|cold|backward|judge|contraction|shards|workers|impls|wrong|two_gpus ...]
# The image has torch, triton, pytest, pytest-xdist, hypothesis and mpmath; wheels in .whl (scripts/fetch_gpu_wheels.sh)
# are installed first when present. Everything lands flat in OUT_DIR (the device tool brings back at most 8 files).
set -uo pipefail
out=${1:?usage: h200_session.sh OUT_DIR [steps]}; shift
steps=${*:-calibration suite sanitize bench}
mkdir -p "$out"
scratch=$(mktemp -d)
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
status=0
for step in $steps; do
    start=$(date +%s)
    case "$step" in
        calibration) python3 - <<'PY' 2>&1 | tee -a "$out/summary.txt"
import hashlib, time, torch, triton
from impl import rope_triton as rope
print("gpu", torch.cuda.get_device_name(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "triton", triton.__version__, "kernel_sha256", hashlib.sha256(open(rope.__file__, "rb").read()).hexdigest()[:16])
begin = time.perf_counter()
calibration = rope.calibrate("cuda:0")
print(f"calibration ({time.perf_counter() - begin:.1f} s, compiles included):", calibration)
print("settings:", rope.settings("cuda:0").describe())
PY
        ;;
        # SIGINT well inside the device tool's 10-minute limit: pytest then still prints its failure summary and
        # the plugin still writes the report. The README's command: ./run's worker count (docs/ci.md), gated by the
        # CUDA baseline.
        suite) DSV41_REPORT="$scratch/report" timeout -s INT "${SUITE_SECONDS:-240}" ./run conformance -q \
                   -p no:cacheprovider -rfE --tb=short --ulp-save-baseline "$out/ulp-drift-cuda.json" ${SUITE_ARGS:-} \
                   > "$out/suite.log" 2>&1 || status=1
               cp "$scratch/report/ulp-drift.md" "$out/" 2>/dev/null
               grep -E "^(FAILED|ERROR)" "$out/suite.log" | cut -c1-300 | head -40 | tee -a "$out/summary.txt"
               grep -E "passed|failed|verdict" "$out/suite.log" | tail -3 | tee -a "$out/summary.txt" ;;
        # Where the suite's time goes (scripts/suite_profile.py): the suite, or the part PROFILE_ARGS selects (e.g.
        # "--splits 8 --group 1"), with per-test wall time, Triton compiles and oracle seconds, under PROFILE_SECONDS.
        # PROFILE_TAG names a run's files apart (profile$PROFILE_TAG.txt), for several profiles in one call.
        profile) tag=${PROFILE_TAG:-}
                 DSV41_PROFILE_DIR="$scratch/profile$tag" DSV41_REPORT="$scratch/profile-report$tag" \
                     timeout -s INT "${PROFILE_SECONDS:-120}" ./run conformance -q -p no:cacheprovider \
                     -p scripts.suite_profile --durations=0 ${PROFILE_ARGS:-} > "$out/profile-suite$tag.log" 2>&1 \
                     || status=1
                 python3 -m scripts.suite_profile "$scratch/profile$tag" --top 40 > "$out/profile$tag.txt" 2>&1
                 echo "profile$tag:" | tee -a "$out/summary.txt"
                 grep -E "passed|failed|verdict" "$out/profile-suite$tag.log" | tail -3 | tee -a "$out/summary.txt"
                 tail -1 "$out/profile$tag.txt" | tee -a "$out/summary.txt"
                 head -30 "$out/profile$tag.txt" ;;
        sanitize) timeout "${SANITIZE_SECONDS:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 \
                      python3 -m scripts.sanitize_probe > "$out/sanitize.log" 2>&1 || status=1
                  tail -3 "$out/sanitize.log" | tee -a "$out/summary.txt" ;;
        bench) timeout "${BENCH_SECONDS:-260}" python3 -m benchmarks.run --out "$scratch/bench" ${BENCH_ARGS:-} \
                   --time-budget "${BENCH_BUDGET:-$(( ${BENCH_SECONDS:-260} - 40 ))}" > "$out/bench.log" 2>&1 || status=1
               cp "$scratch"/bench/run_*.json "$out/" 2>/dev/null
               tail -45 "$out/bench.log" ;;
        sweep) timeout "${SWEEP_SECONDS:-200}" python3 -m benchmarks.sweep --out "$scratch/sweep" --quick ${SWEEP_ARGS:-} \
                   --time-budget "$(( ${SWEEP_SECONDS:-200} - 30 ))" > "$out/sweep.log" 2>&1 || status=1
               cp "$scratch"/sweep/sweep_*.json "$out/" 2>/dev/null
               tail -12 "$out/sweep.log" ;;
        contraction) python3 -m scripts.eager_contraction_probe --out "$scratch" > "$out/contraction.log" 2>&1 || status=1
                     grep -E "model_misses\": [1-9]|SUMMARY" "$out/contraction.log" | head -30 ;;
        # The full suite (or the selection SHARDS_ARGS names, e.g. "-k forward_bits") as 4 pytest-split shards, one
        # after the other (8 workers each, each stopped by SIGINT at its share of SHARDS_SECONDS), merged with the
        # completeness check and gated by the CUDA baseline, then compared with the unsplit report of the suite step
        # ($out/ulp-drift-cuda.json) when that step ran first.
        shards) per=$(( ${SHARDS_SECONDS:-200} / 4 )); reports=()
                for group in 1 2 3 4; do
                    DSV41_REPORT="$scratch/shard$group" timeout -s INT "$per" ./run conformance -q -p no:cacheprovider \
                        --splits 4 --group "$group" ${SHARDS_ARGS:-} > "$scratch/shard$group.log" 2>&1
                    echo "shard $group (exit $?): $(grep -E "passed|failed" "$scratch/shard$group.log" | tail -1)" \
                        >> "$out/shards.log"
                    if [ -f "$scratch/shard$group/ulp-drift.json" ]; then reports+=("$scratch/shard$group/ulp-drift.json"); fi
                done
                timeout 60 python3 -m conformance.merge "$scratch/merged" "${reports[@]}" --expect-splits 4 \
                    --baseline baselines/ulp-drift-cuda.json >> "$out/shards.log" 2>&1 || status=1
                # Without a suite step, the merged report is the run's report and the candidate CUDA baseline.
                if [ ! -f "$out/ulp-drift-cuda.json" ] && [ -f "$scratch/merged/ulp-drift.json" ]; then
                    cp "$scratch/merged/ulp-drift.json" "$out/ulp-drift-cuda.json"
                    cp "$scratch/merged/ulp-drift.md" "$out/ulp-drift.md"
                fi
                python3 -m scripts.same_cases "$out/ulp-drift-cuda.json" "$scratch/merged/ulp-drift.json" \
                    >> "$out/shards.log" 2>&1
                grep -vE "^(mismatch:|\* =|ulp-drift written|MISSING |NEW |\.\.\. and)" "$out/shards.log" | tail -40 \
                    | tee -a "$out/summary.txt" ;;
        # Wall time of one group of 8 of the suite with 1, 2, 4, 8 and 16 xdist workers on one GPU, within a budget of
        # WORKERS_SECONDS, and the full suite's time extrapolated (scripts/worker_scaling.py).
        workers) timeout "$(( ${WORKERS_SECONDS:-150} + 30 ))" python3 -m scripts.worker_scaling --out "$scratch/workers" \
                     --budget "${WORKERS_SECONDS:-150}" > "$out/workers.log" 2>&1 || status=1
                 tee -a "$out/summary.txt" < "$out/workers.log" ;;
        # The suite judging implementations it did not write. The eager reference itself, the whole suite (or the
        # tests IMPLS_TARGETS and IMPLS_ARGS select) on 8 workers without a baseline (the accepted one holds the project kernel's
        # numbers), must pass; then each wrong implementation (conformance/judged/wrong.py), on a slice, must fail:
        # its verdict and failed comparisons.
        impls) timeout -s INT "${IMPLS_SECONDS:-130}" python3 -m pytest -n 8 ${IMPLS_TARGETS:-conformance} -q -p no:cacheprovider -rfE \
                   --tb=line --rope-impl impl.rope_triton:_apply_rope_torch --ulp-report "$scratch/impls" ${IMPLS_ARGS:-} \
                   > "$out/impls-eager.log" 2>&1 || status=1
               grep -E "^(FAILED|ERROR)" "$out/impls-eager.log" | cut -c1-300 | head -20 | tee -a "$out/summary.txt"
               grep -E "passed|failed|verdict" "$out/impls-eager.log" | tail -3 | tee -a "$out/summary.txt"
               ;&
        # Each wrong implementation (conformance/judged/wrong.py) on a slice: each must fail, for its defect.
        wrong) timeout "${IMPLS_WRONG_SECONDS:-70}" python3 -m conformance.judged.run --timeout 60 \
                   > "$out/impls-wrong.log" 2>&1 || status=1
               cut -c1-240 "$out/impls-wrong.log" | tee -a "$out/summary.txt" ;;
        # A quick check of the bits before anything is timed: forward, inverse and in place of every DeepSeek V4.1
        # tensor (BF16 and FP32) against the eager reference on this GPU.
        smoke) python3 - <<'PY' 2>&1 | tee -a "$out/summary.txt" || status=1
import torch
from benchmarks.shapes import CASES, make_angles, make_values
from impl import rope_triton as rope
bad = 0
for dtype in (torch.bfloat16, torch.float32):
    for case in CASES.values():  # the FP32 2 GB tensor too (4 GiB; its in-place launch has a configuration of its own)
        values, angles = make_values(case, dtype), make_angles(case.shape[1])
        for inverse in (False, True):
            expected = rope._apply_rope_torch(values, angles, inverse).view(torch.int16 if dtype != torch.float32 else torch.int32)
            got = rope.apply_rope_triton(values, angles, inverse=inverse).view(expected.dtype)
            in_place = rope.apply_rope_triton_(values.clone(), angles, inverse=inverse).contiguous().view(expected.dtype)
            differ = int((got != expected).sum()), int((in_place != expected).sum())
            bad += sum(differ)
            print(f"smoke {case.name} {dtype} inverse={inverse}: {differ[0]} differ out of place, {differ[1]} in place")
        del values
        torch.cuda.empty_cache()
print("smoke:", "PASS" if bad == 0 else f"FAIL ({bad} elements differ)")
raise SystemExit(1 if bad else 0)
PY
        ;;
        # The speed gate against AGAINST (default 36b8391): every shape and direction in one process.
        against) timeout "${AGAINST_SECONDS:-240}" python3 -m benchmarks.run --against "${AGAINST:-36b8391}" \
                     --out "$scratch/against" --time-budget "$(( ${AGAINST_SECONDS:-240} - 30 ))" ${AGAINST_ARGS:-} \
                     > "$scratch/against.log" 2>&1 || status=1
                 cp "$scratch"/against/against_*.json "$out/" 2>/dev/null
                 tee -a "$out/summary.txt" < "$scratch/against.log" | tail -60 ;;
        # Where the time goes: variants with one stage left out (benchmarks.stages), and hardware counters of each
        # shape's launches under ncu.
        stages) timeout "${STAGES_SECONDS:-150}" python3 -m benchmarks.stages --out "$scratch/stages" \
                    --time-budget "$(( ${STAGES_SECONDS:-150} - 30 ))" > "$scratch/stages.log" 2>&1 || status=1
                cp "$scratch"/stages/stages_*.json "$out/" 2>/dev/null
                tee -a "$out/summary.txt" < "$scratch/stages.log" | tail -40 ;;
        ncu) timeout "${NCU_SECONDS:-150}" ncu --clock-control none --csv --kernel-name 'regex:_rope_kernel|copy_kernel' \
                 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum \
                 python3 -m benchmarks.stages --launch-once > "$out/ncu.csv" 2> "$scratch/ncu.err" || status=1
             tail -5 "$scratch/ncu.err" | tee -a "$out/summary.txt"; wc -l "$out/ncu.csv" | tee -a "$out/summary.txt" ;;
        # What stops the small tensors' in-place call at flash-attention's time (scripts/in_place_ceiling.py): our kernel
        # with and without cos/sin, and with a branch-free cos/sin, over a grid of launch configurations, warm and cold.
        ceiling) timeout "${CEILING_SECONDS:-420}" python3 -m scripts.in_place_ceiling --out "$out" \
                     ${CEILING_ARGS:-} > "$out/ceiling.log" 2>&1 || status=1
                 tee -a "$out/summary.txt" < "$out/ceiling.log" | tail -40 ;;
        # How the copy floor and the op are timed cold (scripts/cold_floor_probe.py): each by graph difference, by
        # events after a flush, and by events that also pay the write-back of the call's dirty lines.
        cold) timeout "${COLD_SECONDS:-150}" python3 -m scripts.cold_floor_probe > "$out/cold.log" 2>&1 || status=1
              grep -v '^{' "$out/cold.log" | tail -40 ;;
        # Why the small tensors' backward trails their forward (scripts/backward_probe.py): the same kernel bare, and
        # the nodes of a captured backward.
        backward) mkdir -p "$scratch/dots"; BACKWARD_DOTS="$scratch/dots" timeout "${BACKWARD_SECONDS:-90}" \
                      python3 -m scripts.backward_probe > "$out/backward.log" 2>&1 || status=1
                  tar -czf "$out/backward-graphs.tgz" -C "$scratch" dots; tail -20 "$out/backward.log" ;;
        # Why the small tensors trail the sketch (scripts/small_tensor_probe.py): warm times of each way of calling
        # our kernel beside the sketch, the kernels a forward and a backward launch, both kernels' SASS (probe.tgz),
        # and one launch of each under ncu (warp states, occupancy, speed of light) in probe-ncu.csv.
        probe) mkdir -p "$scratch/sass"; timeout "${PROBE_SECONDS:-120}" python3 -m scripts.small_tensor_probe --sass "$scratch/sass" \
                   > "$scratch/sass/probe.log" 2>&1 || status=1
               timeout "${PROBE_NCU_SECONDS:-120}" ncu --clock-control none --csv --kernel-name 'regex:rope|copy' \
                   --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
                   --section SchedulerStats python3 -m scripts.small_tensor_probe --once \
                   > "$scratch/sass/probe-ncu.csv" 2> "$scratch/sass/probe-ncu.err" || status=1
               tar czf "$out/probe.tgz" -C "$scratch" sass
               tee -a "$out/summary.txt" < "$scratch/sass/probe.log" | cut -c1-400 ;;
        # A failing implementation against passing ones on the same selection (issue 21: at most 1.5x): the project
        # kernel (the same compiles as the wrong ones, which call it) and the eager reference (JUDGE_PASSING, which
        # may be empty), then each of JUDGE_IMPLS, each under JUDGE_SECONDS, its wall time and outcome in judge.log.
        judge) selection=${JUDGE_TARGETS:-conformance/test_forward_bits.py conformance/test_gradient_conjugate.py}
               for impl in ${JUDGE_PASSING-impl.rope_triton:apply_rope_triton impl.rope_triton:_apply_rope_torch} \
                           ${JUDGE_IMPLS:-conformance.judged.wrong:rotates_leading_channels}; do
                   began=$(date +%s%N)
                   timeout -s INT "${JUDGE_SECONDS:-100}" python3 -m pytest -n 8 $selection \
                       -k "${JUDGE_K:-not oracle_equals_torch_eager}" -q -p no:cacheprovider --rope-impl "$impl" \
                       --durations=15 \
                       --ulp-report "$scratch/judge-${impl##*:}" > "$scratch/judge-${impl##*:}.log" 2>&1
                   code=$?
                   echo "judged $impl: exit $code in $(( ($(date +%s%N) - began) / 1000000 )) ms:" \
                        "$(grep -E "passed|failed" "$scratch/judge-${impl##*:}.log" | tail -1)" | tee -a "$out/judge.log"
               done
               tar czf "$out/judge-logs.tgz" -C "$scratch" $(cd "$scratch" && ls judge-*.log judge-*/ulp-drift.md 2>/dev/null)
               tee -a "$out/summary.txt" < "$out/judge.log" > /dev/null ;;
        # Issue 22, on a host with two GPUs (the device tool's nvidia-h200-x2): the suite over both GPUs (./run's
        # workers, gwN on GPU N mod 2), with each worker's device, each device's calibration and cases; the suite as 2
        # shards at once, one a GPU (CUDA_VISIBLE_DEVICES), merged and compared with that unsplit run's cases; and
        # calls across the two GPUs (scripts/two_gpu_probe.py).
        two_gpus) began=$(date +%s)
                  DSV41_REPORT="$scratch/two" timeout -s INT "${TWO_SUITE_SECONDS:-240}" ./run conformance -q \
                      -p no:cacheprovider -rfE --tb=short > "$out/two-gpus-suite.log" 2>&1 || status=1
                  echo "suite over both GPUs: $(( $(date +%s) - began )) s:" \
                       "$(grep -E "passed|failed" "$out/two-gpus-suite.log" | tail -1)" | tee -a "$out/summary.txt"
                  cp "$scratch/two/ulp-drift.md" "$out/two-gpus-ulp-drift.md" 2>/dev/null
                  began=$(date +%s)
                  for group in 1 2; do
                      CUDA_VISIBLE_DEVICES=$(( group - 1 )) timeout -s INT "${TWO_SHARD_SECONDS:-200}" \
                          .ci/shard "$group" 2 "$scratch/shards/$group" -q -p no:cacheprovider \
                          > "$scratch/shards-$group.log" 2>&1 &
                  done
                  wait
                  echo "2 shards at once, one a GPU: $(( $(date +%s) - began )) s:" \
                       "$(tail -qn1 "$scratch"/shards-*.log | tr '\n' ' ')" | tee -a "$out/summary.txt"
                  .ci/merge "$scratch/shards" "$scratch/merged" 2 > "$out/two-gpus-merge.log" 2>&1 || status=1
                  python3 - "$scratch/two/ulp-drift.json" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import collections
import json
import sys

report = json.load(open(sys.argv[1]))
metadata = report["metadata"]
print("workers and their devices:", ", ".join(metadata.get("xdist_worker_devices", [])))
print("calibration by device:", metadata.get("from_tests", {}).get("kernel calibration"))
print("cases by device:", dict(sorted(collections.Counter(c["device"] for c in report["cases"].values()).items())))
PY
                  python3 -m scripts.same_cases "$scratch/two/ulp-drift.json" "$scratch/merged/ulp-drift.json" \
                      --label "shards merged against the run over both GPUs" 2>&1 | tee -a "$out/summary.txt"
                  tail -3 "$out/two-gpus-merge.log" | tee -a "$out/summary.txt"
                  python3 -m scripts.two_gpu_probe 2>&1 | tee -a "$out/summary.txt" || status=1 ;;
        *) echo "unknown step $step"; status=2 ;;
    esac
    echo "step $step: $(( $(date +%s) - start )) s, status so far $status" | tee -a "$out/summary.txt"
done
exit $status
