#!/usr/bin/env bash
# flash-attention's Triton rotary kernel (flash_attn/ops/triton/rotary.py of flash-attn 2.8.3.post2), the peer the
# benchmarks time beside ours; other projects' code, so git ignores it and it is never committed.
#
# Usage (from anywhere in the checkout, on a machine with network access):  tools/fetch_flash_rotary.sh [DEST]
#
# Downloads the sdist with pip, checks its SHA-256 and the file's, and writes DEST (default .peers/flash_attn_rotary.py,
# where benchmarks.in_place looks; DSV41_FLASH_ROTARY names another place).
set -euo pipefail
cd "$(dirname "$0")/.."
destination=${1:-.peers/flash_attn_rotary.py}
version=2.8.3.post2
sdist_sha256=d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b
rotary_sha256=d2037e623854c702fb075784fe4292d4a89d6b9ac1ae33cab3d6788f8f94f240
python=${PYTHON:-python3}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# pip reads the sdist's metadata by running its setup, which imports torch (hence no build isolation) and would
# build the CUDA extension but for FLASH_ATTENTION_SKIP_CUDA_BUILD.
FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE "$python" -m pip download -q --no-binary :all: --no-deps --no-build-isolation \
    -d "$scratch" "flash-attn==$version"
archive=$scratch/flash_attn-$version.tar.gz
echo "$sdist_sha256  $archive" | sha256sum -c --quiet
tar -xzf "$archive" -C "$scratch" "flash_attn-$version/flash_attn/ops/triton/rotary.py"
rotary=$scratch/flash_attn-$version/flash_attn/ops/triton/rotary.py
echo "$rotary_sha256  $rotary" | sha256sum -c --quiet
mkdir -p "$(dirname "$destination")"
cp "$rotary" "$destination"
echo "$destination"
