#!/usr/bin/env bash
# A revision's kernel source, written where tools.build_cost and benchmarks.run --against load it without git: on a
# machine whose copy of the checkout lacks that revision (a GPU runner's), or to compare builds offline.
#
# Usage (from anywhere in the checkout):  tools/export_kernel.sh REV DEST_DIR
#
# Writes DEST_DIR/kernel_<commit>/, the package dsv41_rope/kernel at REV (git archive), or, for a revision before the
# package, DEST_DIR/kernel_<commit>.py, its single file impl/rope_triton.py; prints the path written on its last line:
#   PREVIOUS=$(tools/export_kernel.sh main .peers | tail -1) tools/gpu_gate.sh OUT_DIR
#   python -m tools.build_cost dsv41_rope/kernel "$(tools/export_kernel.sh HEAD~1 /tmp/kernels | tail -1)"
set -euo pipefail
if [ $# -ne 2 ]; then
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
fi
revision=$1
mkdir -p "$2"
destination=$(cd "$2" && pwd)
cd "$(dirname "$0")/.."
commit=$(git rev-parse --verify --quiet "$revision^{commit}") || { echo "export_kernel: no revision $revision" >&2; exit 1; }
name=kernel_${commit:0:12}
if git cat-file -e "$commit:dsv41_rope/kernel/__init__.py" 2> /dev/null; then
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    git archive "$commit" dsv41_rope/kernel | tar -x -C "$scratch"
    rm -rf "${destination:?}/$name"
    mv "$scratch/dsv41_rope/kernel" "$destination/$name"
    echo "$destination/$name"
elif git cat-file -e "$commit:impl/rope_triton.py" 2> /dev/null; then
    git show "$commit:impl/rope_triton.py" > "$destination/$name.py"
    echo "$destination/$name.py"
else
    echo "export_kernel: $revision has neither dsv41_rope/kernel/ nor impl/rope_triton.py" >&2
    exit 1
fi
