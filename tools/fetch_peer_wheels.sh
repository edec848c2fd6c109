#!/usr/bin/env bash
# The pinned peers of dsv41_rope/peers, downloaded for the GPU runner's python (CPython 3.12, manylinux x86_64) into
# DEST, to carry there (the device tool carries at most 64 MiB, the checkout's ~10 MiB included) and install with
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site DEST/*.whl
#   export PYTHONPATH=/tmp/site DSV41_PEER_WHEELS=DEST
# Other projects' code: DEST belongs in a folder git ignores (e.g. .wheels/peers) and is never committed.
#
# Usage (from anywhere, on a machine with network access and a python with torch and wheel, PYTHON naming it):
#   tools/fetch_peer_wheels.sh DEST
#
# What it saves, each checked against its pinned SHA-256, and why the rest is left out:
#   nemo_automodel-0.7.0 (3.8 MB), liger_kernel-0.8.5 (0.9 MB), megatron_core-0.19.2 (2.4 MB): wheels as published.
#   flash_attn-2.8.3.post2.tar.gz (8.5 MB): flash-attn is published as an sdist only, whose install compiles CUDA;
#     the adapter reads flash_attn/ops/triton/rotary.py out of it ($DSV41_PEER_WHEELS), nothing is built. pip reads
#     the sdist's metadata by running its setup, which imports torch and wheel (hence no build isolation, and PYTHON
#     must have both) and would build the CUDA extension but for FLASH_ATTENTION_SKIP_CUDA_BUILD.
#   sglang-0.5.23: its wheel is 39 MB; beside the rest and the checkout (9.7 MB) it would leave under 3 MiB of the
#     64 MiB carry. The adapters load one file of it by path, so the wheel is cut to that file and its metadata
#     (tools/slim_wheel.py: 19 KB, the same name and version; pip installs it as sglang 0.5.23).
#   Left out: vllm-0.33.0 (336 MB, its CUDA op compiled against torch 2.14.0: no part of it fits or runs there) and
#     transformers-5.17.0 (12 MB; the GPU runner has it installed, which nemo-automodel's import chain needs too).
#   No other dependency is needed at import time there: the adapters' import chains need torch, triton, numpy,
#     packaging and transformers, which the runner has (nemo-automodel's pydantic import is optional).
# Total: 15,526,906 bytes (14.8 MiB); the script fails past BUDGET_MIB.
set -euo pipefail
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
if [ "$#" -ne 1 ]; then usage >&2; exit 2; fi
mkdir -p "$1"
destination=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
BUDGET_MIB=32

# The GPU runner's interpreter; pip matches each manylinux tag exactly, so every one the pins use is named.
runner=(--only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
declare -A sha256=(
    [nemo_automodel-0.7.0-py3-none-any.whl]=37b8397a73c17e4a8bffd0cd3becc0507abecc1ebfea3b3eb6468eed57ba6674
    [liger_kernel-0.8.5-py3-none-any.whl]=60789cd576af073ab9b192b570d2597fd0cdad489cd62fb44fb16256d43754c9
    [megatron_core-0.19.2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl]=8e3e486f13f559450415b9b9dc0ff3331a0bb83dd154553f7f350a75ff9c42b5
    [flash_attn-2.8.3.post2.tar.gz]=d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b
    [sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl]=8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6
)
sglang_wheel=sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m pip download -q --no-deps "${runner[@]}" -d "$scratch" \
    nemo-automodel==0.7.0 liger-kernel==0.8.5 megatron-core==0.19.2 sglang==0.5.23
FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE "$python" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
    -d "$scratch" flash-attn==2.8.3.post2
for name in "${!sha256[@]}"; do
    echo "${sha256[$name]}  $scratch/$name" | sha256sum -c --quiet
done

for name in "${!sha256[@]}"; do
    [ "$name" = "$sglang_wheel" ] || cp "$scratch/$name" "$destination/$name"
done
"$python" -m tools.slim_wheel "$scratch/$sglang_wheel" "$destination/$sglang_wheel" \
    sglang/kernels/ops/attention/dsv4/rope.py >/dev/null

total=0
for name in $(printf '%s\n' "${!sha256[@]}" | sort); do
    size=$(stat -c %s "$destination/$name")
    total=$((total + size))
    printf '%10d  %s\n' "$size" "$destination/$name"
done
printf '%10d  total (%s MiB; budget %d MiB)\n' "$total" "$(awk "BEGIN { printf \"%.1f\", $total / 1048576 }")" "$BUDGET_MIB"
if [ "$total" -gt $((BUDGET_MIB * 1048576)) ]; then
    echo "fetch_peer_wheels: $total bytes is over the budget of $BUDGET_MIB MiB" >&2
    exit 1
fi
