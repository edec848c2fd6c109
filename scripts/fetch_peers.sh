#!/usr/bin/env bash
# Rebuild .peers/ on this (networked) machine: the comparators the speed gate and the probes load, which the device
# tool carries (`carry: [".peers"]`) and git ignores (they are other projects' code, or old revisions of ours):
#   one_launch_sketch.py   the sketch issue 20 measures against, copied from ../shared/reference/
#   flash_attn_rotary.py   flash-attention 2.8.3.post2's flash_attn/ops/triton/rotary.py, from its sdist on PyPI,
#                          the archive checked against PyPI's SHA-256 and the file against the one runs 55-63 loaded
#   k_<hash>.py            impl/rope_triton.py at each REV given (default: main; 06c47c4, whose kernel is 62ac434b,
#                          the previous main's; and 16ed4ad, whose kernel is fdd1a19b, the one before), for
#                          `python -m benchmarks.run --against .peers/k_<hash>.py`: the device's copy of the
#                          checkout may lack recent commits, a file needs none
# Usage (repository root or anywhere in it):  bash scripts/fetch_peers.sh [REV ...]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .peers
sdist_url=https://files.pythonhosted.org/packages/6c/b1/b77625e3d11260d2bd6a4fc249a4be9a3da97ff848e2222e810c4f0e0211/flash_attn-2.8.3.post2.tar.gz
sdist_sha256=d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b
rotary_sha256=d2037e623854c702fb075784fe4292d4a89d6b9ac1ae33cab3d6788f8f94f240

cp ../shared/reference/one_launch_sketch.py .peers/one_launch_sketch.py

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
curl -fsSL --retry 3 -o "$scratch/flash_attn.tar.gz" "$sdist_url"
echo "$sdist_sha256  $scratch/flash_attn.tar.gz" | sha256sum -c --quiet
tar -xzf "$scratch/flash_attn.tar.gz" -C "$scratch" --wildcards '*/flash_attn/ops/triton/rotary.py'
rotary=$(find "$scratch" -path '*/flash_attn/ops/triton/rotary.py' | head -1)
echo "$rotary_sha256  $rotary" | sha256sum -c --quiet
cp "$rotary" .peers/flash_attn_rotary.py

revisions=("$@")
[ ${#revisions[@]} -gt 0 ] || revisions=(main 06c47c4 16ed4ad)
for revision in "${revisions[@]}"; do
    git show "$revision:impl/rope_triton.py" > "$scratch/kernel.py"
    hash=$(sha256sum "$scratch/kernel.py" | cut -c1-8)
    cp "$scratch/kernel.py" ".peers/k_$hash.py"
    echo "$revision: .peers/k_$hash.py"
done
ls -l .peers
