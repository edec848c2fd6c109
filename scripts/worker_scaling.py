"""Wall time of the conformance suite against the number of xdist workers on one GPU, within a time budget.

Runs one fixed, representative slice of the suite (by default pytest-split's group 1 of 8, balanced by the committed
durations file) through ``./run conformance -n N`` for each worker count, one after the other, and prints per count the
wall time and the full suite's time extrapolated from it (the slice's wall time times the number of groups: an upper
bound, since each run pays the workers' start-up once). Counts that no longer fit the budget are skipped, and the
output says so; a run the budget cuts short is stopped by SIGINT (so pytest still ends its session) and reported as
such. Usage, on the GPU machine from the repository root (``scripts/h200_session.sh OUT workers`` runs it)::

    python3 -m scripts.worker_scaling --out OUT [--counts 1,2,4,8,16] [--splits 8 --group 1] [--budget 150]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Returns the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for workers.json and the runs' reports")
    parser.add_argument("--counts", default="1,2,4,8,16", help="worker counts to time, in order (default 1,2,4,8,16)")
    parser.add_argument("--splits", type=int, default=8, help="the slice is one group of this many (default 8)")
    parser.add_argument("--group", type=int, default=1, help="which group (default 1)")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds for all the runs together (default 150)")
    parser.add_argument("--min-seconds", type=float, default=10.0, help="skip a count with less time than this left")
    parser.add_argument("--run", default="./run", help="the suite's entry point (default ./run)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return parser.parse_args(argv)


def timed_run(command: list[str], env: dict[str, str], limit: float, log: Path) -> tuple[float, int | None]:
    """Runs `command` in its own process group, stopping it by SIGINT after `limit` seconds.

    Returns:
        The wall time in seconds and the exit status, None when the limit stopped it.
    """
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as stream:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            status: int | None = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            status = None
    return time.perf_counter() - start, status


def main(argv: Sequence[str] | None = None) -> int:
    """Times each worker count; returns 0 when every run that fitted the budget passed."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    began = time.perf_counter()
    results = []
    print(f"slice: group {args.group} of {args.splits}; budget {args.budget:.0f} s")
    print(f"{'workers':>7}  {'wall s':>7}  {'status':>7}  {'full suite s (x' + str(args.splits) + ')':>22}")
    for count in counts:
        left = args.budget - (time.perf_counter() - began)
        if left < args.min_seconds:
            print(f"{count:>7}  skipped: {left:.0f} s of the budget left")
            results.append({"workers": count, "skipped": True})
            continue
        report = args.out / f"workers-{count}"
        command = [args.run, "conformance", "-q", "-p", "no:cacheprovider", "-n", str(count)]
        command += ["--splits", str(args.splits), "--group", str(args.group), *args.pytest_args]
        env = {**os.environ, "DSV41_REPORT": str(report)}
        wall, status = timed_run(command, env, left, args.out / f"workers-{count}.log")
        shown = "budget" if status is None else str(status)
        full = f"{wall * args.splits:.0f}" if status is not None else "-"
        print(f"{count:>7}  {wall:>7.1f}  {shown:>7}  {full:>22}")
        full_s = round(wall * args.splits, 1) if status is not None else None
        results.append({"workers": count, "wall_s": round(wall, 2), "status": status, "full_suite_s": full_s})
    skipped = [r["workers"] for r in results if r.get("skipped")]
    if skipped:
        print(f"budget of {args.budget:.0f} s spent: worker counts {skipped} not timed")
    (args.out / "workers.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r.get("status") in (0, None) for r in results if not r.get("skipped")) else 1


if __name__ == "__main__":
    sys.exit(main())
