"""``dsv41-rope matrix``: the installed suite run against each peer, each in its own pytest process under a time
limit, then their speed side by side, written as ``matrix.json`` and ``matrix.md`` (with standalone reproductions of
every deviation under ``repros/``).

    dsv41-rope matrix [--peers NAME,NAME] [--out DIR] [--time-limit S] [--jobs N] [--workers N]
                      [--case-size small|full] [--no-speed] [--speed-budget S]

A peer that is not installed, or cannot run here, gets a row that says why; one that crashes or hangs costs its own
row. Exit status 0 when every row was judged or said why not (the verdicts are the table's, not the exit status), 2
on a usage error (an unknown peer).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsv41_rope.conformance.judged.run import TIMED_OUT, judge
from dsv41_rope.harness import provenance
from dsv41_rope.harness.smoke import SMOKE_SELECTION
from dsv41_rope.matrix import columns, table
from dsv41_rope.peers.loading import Pin, sdist_archive
from dsv41_rope.peers.registry import PEERS, Peer, by_name

__all__ = [
    "PROJECT_PEER",
    "SCHEMA",
    "build_parser",
    "judge_peer",
    "main",
    "read_run",
    "record_of",
    "repro_call_of",
    "run_matrix",
    "selection_text",
    "write_matrix",
]

SCHEMA = 1
# This project's own kernel, judged beside the peers (its row is the one to beat).
PROJECT_PEER = Peer(
    "dsv41-rope",
    None,
    None,
    "dsv41_rope:apply_rope_triton",
    "dsv41_rope/kernel: apply_rope_triton(values, angles, *, inverse=False)",
    "triton",
    "project",
    backward=True,
    notes="This project's kernel, named through the package's face so that it is judged as any other implementation "
    "is: its self-tests are not collected, and it is held to the contract alone.",
)
# Left out of every peer's run: its 4.4 GB tensors (and eager's float32 copies of them), in runs side by side, would
# exhaust the GPU's memory and fail for that, not for the peer.
_LEFT_OUT = "test_more_than_2_to_the_31_elements_gives_eager_bits"
# An outer pytest run's state that must not leak into a peer's run.
_OUTER = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")


def _installed_version(peer: Peer) -> str | None:
    try:
        if peer.distribution is None:
            return f"dsv41-rope {importlib.metadata.version('dsv41-rope')}"
        if peer.loaded == "path-sdist":  # read out of its source archive, never installed
            return peer.version if sdist_archive(Pin(peer.distribution, peer.version)) else None
        return importlib.metadata.version(peer.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def record_of(peer: Peer) -> dict[str, Any]:
    """What a row says of its peer before any run."""
    return {
        "peer": peer.name,
        "distribution": peer.distribution,
        "pinned": peer.version,
        "installed": _installed_version(peer),
        "adapter": peer.adapter,
        "peer_function": peer.peer_function,
        "kind": peer.kind,
        "loaded": peer.loaded,
        "backward": peer.backward,
        "notes": peer.notes,
    }


def judge_peer(
    peer: Peer, out: Path, *, time_limit: float, workers: str, case_size: str, select: str | None = None
) -> dict[str, Any]:
    """Runs the installed suite against one peer's adapter in a fresh pytest process and reads what it said.

    Returns:
        The peer's row: its record, the run's status, test counts, the cells of the bit columns, the worst norm-wise
        errors, the references it was held to, and the failed tests by column (for the reproductions).
    """
    row = record_of(peer)
    if peer.unavailable:
        return {**row, "status": f"unavailable: {peer.unavailable}"}
    if peer.distribution and row["installed"] is None:
        return {**row, "status": f"not installed: pip install --no-deps {peer.pin}"}
    workdir = out / "runs" / peer.name
    env = {key: value for key, value in os.environ.items() if key not in _OUTER}
    from dsv41_rope.conformance.cases import CASE_SIZE_VARIABLE  # imports torch: not when the parser loads

    env[CASE_SIZE_VARIABLE] = case_size
    env["DSV41_ROPE_HYPOTHESIS_PROFILE"] = "quick"
    arguments = ["--pyargs", "dsv41_rope.conformance", "-n", workers, "--rope-impl-claims", "none", "-q", "-rN"]
    selection = f"({select}) and not {_LEFT_OUT}" if select else f"not {_LEFT_OUT}"
    arguments += ["-k", selection]
    began = time.monotonic()
    outcome = judge(peer.adapter, workdir, arguments, env=env, timeout=time_limit)
    row["seconds"] = round(time.monotonic() - began, 1)
    if outcome.exit_status == TIMED_OUT:
        status = f"stopped at its {time_limit:g} s limit after {len(outcome.tests)} tests"
    elif outcome.exit_status not in (0, 1) or not outcome.tests:
        # Exit 2 here means interrupted (a crashed worker is a failed test, not this), 4 usage error.
        tail = " | ".join(outcome.output.strip().splitlines()[-3:])[-400:]
        status = f"not judged (pytest exit {outcome.exit_status}): {tail}"
    else:
        status = "judged"
    return read_run(row, workdir, outcome.tests, outcome.failures, status, outcome.exit_status)


def read_run(
    row: dict[str, Any],
    workdir: Path,
    tests: dict[str, str],
    junit_failures: dict[str, str],
    status: str,
    exit_status: int | None,
) -> dict[str, Any]:
    """A peer's row from its run's outcomes (junit) and report (``workdir/report/ulp-drift.json``)."""
    report_path = workdir / "report" / "ulp-drift.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {"cases": {}, "metadata": {}}
    failures = report["metadata"].get("failed_tests") or {}
    counts: dict[str, int] = {}
    for outcome in tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    row.update(status=status, exit_status=exit_status, tests=counts)
    row["cells"] = columns.cells(tests, failures, has_backward=row["backward"])
    row["normwise"] = columns.worst_normwise(report["cases"])
    row["references"] = sorted((report["metadata"].get("from_tests") or {}).get("references") or {})
    row["failed"] = _failed_by_column(tests, failures, junit_failures, has_backward=row["backward"])
    return row


def _failed_by_column(
    tests: dict[str, str], failures: dict[str, Any], junit_failures: dict[str, str], *, has_backward: bool
) -> dict[str, list[list[str]]]:
    """Per failing column, its failed tests in the suite's order: node id and failure line (the report's line, which
    is whole, where it has one); none for the backward of a peer without one (its column is n/a)."""
    lines = {columns.parse_test(nodeid): entry.get("message", "") for nodeid, entry in failures.items()}
    whats = columns.whats_of(failures)
    found: dict[str, list[list[str]]] = {}
    for column in columns.BIT_COLUMNS:
        if column.backward and not has_backward:
            continue
        for nodeid in columns.column_outcomes(column, tests, whats)[1]:
            line = lines.get(columns.parse_test(nodeid)) or junit_failures.get(nodeid, "")
            found.setdefault(column.title, []).append([nodeid, line])
    return found


def repro_call_of(adapter: str) -> str:
    """The peer's call an adapter makes, standalone (``dsv41_rope.peers.repro_call``).

    Raises:
        KeyError: none is known for the adapter.
    """
    from dsv41_rope.peers import repro_call

    return repro_call(adapter)


def _reproductions(row: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    """Writes and runs the row's reproductions (none where the adapter has no standalone call)."""
    if not row.get("failed"):
        return []
    try:
        call = repro_call_of(row["adapter"])
    except (ImportError, KeyError) as error:
        row["repro_note"] = f"no standalone call for {row['adapter']}: {error}"
        return []
    import torch

    from dsv41_rope.matrix.repros import write_reproductions

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    title = f"{row['peer']} {row.get('installed') or ''}".strip()
    failed = {column: [tuple(test) for test in tests] for column, tests in row["failed"].items()}
    written = write_reproductions(title, call, failed, out / "repros" / row["peer"], device)
    return [{**repro.to_json(), "path": str(Path(repro.path).relative_to(out))} for repro in written]


def run_matrix(peers: Sequence[Peer], out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Judges every peer (``args.jobs`` at a time), writes their reproductions, measures their speed, and writes
    ``matrix.json`` and ``matrix.md`` to ``out``; returns the matrix."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.from_runs:
        from dsv41_rope.matrix.published import publish_runs

        return publish_runs(peers, args.from_runs.resolve(), out, args)
    rows: dict[str, dict[str, Any]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            pool.submit(
                judge_peer,
                peer,
                out,
                time_limit=args.time_limit,
                workers=args.workers,
                case_size=args.case_size,
                select=SMOKE_SELECTION if args.smoke else None,
            ): peer
            for peer in peers
        }
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            peer = futures[future]
            row = future.result()
            rows[peer.name] = row
            cells = ", ".join(f"{k} {v}" for k, v in row.get("cells", {}).items() if v != "PASS")
            said = f"; {cells or 'every column PASS'}" if "cells" in row else ""
            print(f"[{done}/{len(peers)}] {peer.name}: {row['status']}{said}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, 2 * args.jobs)) as pool:
        written = pool.map(lambda peer: _reproductions(rows[peer.name], out), peers)
        for peer, repros in zip(peers, written, strict=True):
            rows[peer.name]["repros"] = repros
    matrix = {
        "schema": SCHEMA,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "project": {
            **provenance.git_state(Path(__file__).resolve().parent),
            "version": _installed_version(PROJECT_PEER),
            "kernel_sha256": provenance.kernel_sha256(provenance.kernel_source()),
        },
        "environment": {**provenance.versions(), "gpu": provenance.gpu_names() or "none"},
        "case_size": args.case_size,
        "selection": selection_text(args.smoke),
        "time_limit_s": args.time_limit,
        "rows": [rows[peer.name] for peer in peers],
    }
    if not args.no_speed:
        matrix["speed"] = _speed(peers, out, args.speed_budget)
    write_matrix(matrix, out)
    return matrix


def write_matrix(matrix: dict[str, Any], out: Path) -> None:
    (out / "matrix.json").write_text(json.dumps(matrix, indent=1, sort_keys=True) + "\n")
    (out / "matrix.md").write_text(table.render(matrix))
    print(f"matrix: wrote {out / 'matrix.json'} and {out / 'matrix.md'}", flush=True)


def selection_text(smoke: bool) -> str:
    suite = "the smoke selection" if smoke else "the whole contract suite"
    return f"{suite} but {_LEFT_OUT}, generated layouts under the quick profile (10 examples a shard)"


def _speed(peers: Sequence[Peer], out: Path, budget: float) -> dict[str, Any]:
    """The peers' speed side by side in one process (``python -m dsv41_rope.matrix.speed``), or why not."""
    # A peer that writes out of bounds goes last: a CUDA context it corrupts would fail every later cell.
    measured = sorted(
        (peer for peer in peers if peer is not PROJECT_PEER), key=lambda peer: peer.writes_past_the_tensor
    )
    names = ",".join(peer.name for peer in measured)
    path = out / "speed.json"
    command = [sys.executable, "-m", "dsv41_rope.matrix.speed", "--out", str(path), "--time-budget", str(budget)]
    command += ["--peers", names] if names else []
    try:
        done = subprocess.run(command, timeout=budget + 120, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {budget + 120:g} s"}
    print(done.stdout[-2000:], end="", flush=True)
    if path.is_file():
        return json.loads(path.read_text())
    return {"error": f"exit {done.returncode}: {(done.stdout + done.stderr).strip()[-400:]}"}


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    parser = argparse.ArgumentParser(
        prog="dsv41-rope matrix",
        description="Run the installed suite against each peer (each in its own pytest process, under a time limit) "
        "and this project's kernel, measure their speed side by side, and write matrix.json and matrix.md, with a "
        "standalone reproduction of every deviation under repros/. Exit status: 0 when every row was judged or says "
        "why not (the verdicts are the table's), 2 on a usage error.",
    )
    names = ", ".join(peer.name for peer in PEERS)
    parser.add_argument("--peers", help=f"comma-separated peers (default: all): {names}")
    parser.add_argument("--out", type=Path, default=Path("rope-matrix"), help="output folder (default rope-matrix)")
    parser.add_argument("--time-limit", type=float, default=600, help="seconds per peer's suite (default 600)")
    parser.add_argument("--jobs", type=int, default=1, help="peers judged at once (default 1)")
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers per peer (default auto)")
    parser.add_argument(
        "--case-size",
        choices=("small", "full"),
        default="small",
        help="the cases' size on a GPU: small (the CPU's, default) or full (DeepSeek V4.1's)",
    )
    parser.add_argument("--smoke", action="store_true", help="the suite's smoke selection only (dsv41-rope certify's)")
    parser.add_argument("--no-speed", action="store_true", help="judge only, measure no speed")
    parser.add_argument("--speed-budget", type=float, default=240, help="seconds for the speed part (default 240)")
    parser.add_argument(
        "--from-runs",
        type=Path,
        metavar="DIR",
        help="run nothing: publish the runs of an earlier matrix's folder (its reproductions run here); the other "
        "options say how that run was made",
    )
    parser.add_argument("--commit", help="with --from-runs: the commit the installed package there was built from")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; see the module docstring for the exit status."""
    args = build_parser().parse_args(argv)
    try:
        chosen = [by_name(name.strip()) for name in args.peers.split(",")] if args.peers else list(PEERS)
    except KeyError as error:
        print(f"dsv41-rope matrix: {error.args[0]}", file=sys.stderr)
        return 2
    run_matrix([PROJECT_PEER, *chosen], args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
