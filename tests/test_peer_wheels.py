"""tools/fetch_peer_wheels.sh downloads every pinned peer that can run, through plain ``pip download``, for the GPU
runner's python; tools/slim_wheel.py cuts a wheel to the files an adapter loads, with a true ``RECORD``.
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from dsv41_rope.peers import PEERS
from tools import slim_wheel

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "fetch_peer_wheels.sh"


def test_the_wheel_script_downloads_every_runnable_pin_with_plain_pip():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    assert not re.search(r"https?://|pypi\.org|pythonhosted|--index-url|--extra-index|--find-links", text), (
        "the script names no package index: plain pip download, with pip's own configuration"
    )
    commands = " ".join(line for line in text.replace("\\\n", " ").splitlines() if '"$python" -m pip download' in line)
    downloaded = set(re.findall(r"([\w-]+==[\w.]+)", commands))
    runnable = {peer.pin for peer in PEERS if peer.pin and not peer.unavailable} - {"transformers==5.17.0"}
    assert downloaded == runnable, f"downloaded {sorted(downloaded)}, expected {sorted(runnable)}"
    for left_out in ("vllm-0.33.0", "transformers-5.17.0"):
        assert re.search(rf"Left out:.*{left_out}", text, re.S), f"{left_out}: the header says why it is left out"
    assert "--only-binary=:all: --python-version 3.12 --implementation cp" in text


def test_the_wheel_script_checks_its_arguments():
    for arguments, status in (([], 2), (["a", "b"], 2), (["--help"], 0)):
        done = subprocess.run(["bash", str(SCRIPT), *arguments], capture_output=True, text=True, check=False)
        assert done.returncode == status, f"{arguments}: exit {done.returncode}\n{done.stderr}"
        assert "tools/fetch_peer_wheels.sh DEST" in done.stdout + done.stderr


def test_a_slim_wheel_keeps_the_members_and_metadata_with_a_true_record(tmp_path):
    source = tmp_path / "big-1.0-py3-none-any.whl"
    files = {
        "big/__init__.py": b"import server\n",
        "big/ops/rope.py": b"Z = 1\n",
        "big-1.0.dist-info/METADATA": b"Name: big\nVersion: 1.0\n",
        "big-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n",
        "big-1.0.dist-info/entry_points.txt": b"[console_scripts]\nbig = big.cli:main\n",
        "big-1.0.dist-info/RECORD": b"stale\n",
    }
    with zipfile.ZipFile(source, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    names = slim_wheel.slim(source, tmp_path / "slim.whl", ["big/ops/rope.py"])
    kept = ["big/ops/rope.py", "big-1.0.dist-info/METADATA", "big-1.0.dist-info/WHEEL", "big-1.0.dist-info/RECORD"]
    assert names == kept
    with zipfile.ZipFile(tmp_path / "slim.whl") as slimmed:
        assert slimmed.namelist() == kept
        record = slimmed.read("big-1.0.dist-info/RECORD").decode().splitlines()
        assert record == [slim_wheel.record_line(n, files[n]) for n in kept[:3]] + ["big-1.0.dist-info/RECORD,,"]
        assert slimmed.read("big/ops/rope.py") == b"Z = 1\n"
    with pytest.raises(KeyError, match="has no big/missing.py"):
        slim_wheel.slim(source, tmp_path / "other.whl", ["big/missing.py"])
