#!/usr/bin/env bash
# Download, on this (networked) machine, the wheels the H200 of the device tool lacks for the suite, into .whl/,
# which the device tool carries (`carry: [".whl"]`) and scripts/h200_session.sh installs. The H200 has no network.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    pytest==9.0.3 pytest-xdist==3.8.0 pytest-split==0.11.0 execnet pluggy iniconfig packaging pygments mpmath==1.3.0 \
    hypothesis==6.170.17 sortedcontainers
ls .whl
