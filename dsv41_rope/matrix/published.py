"""Publishing a matrix run made elsewhere (``dsv41-rope matrix --from-runs DIR``): its rows read from the junit XML
and report each peer's run left in ``DIR/runs/``, its environment from the project row's report, and its
reproductions copied and run here, where they show whether they reproduce alone."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from dsv41_rope.conformance.judged.run import read_junit
from dsv41_rope.harness import provenance
from dsv41_rope.matrix.command import PROJECT_PEER, SCHEMA, read_run, record_of, selection_text, write_matrix
from dsv41_rope.matrix.repros import Repro, repro_file_name, run_reproduction
from dsv41_rope.peers.registry import Peer

__all__ = ["publish_runs", "rows_from_runs"]


def rows_from_runs(peers: Sequence[Peer], runs: Path) -> dict[str, dict[str, Any]]:
    """The rows of an earlier matrix run's folder (``runs/<peer>/``: junit XML and report), without running any
    suite: for publishing a run made elsewhere. A run its report says was interrupted was stopped at its limit."""
    rows = {}
    for peer in peers:
        row = record_of(peer)
        junit = runs / peer.name / "junit.xml"
        if peer.unavailable:
            row["status"] = f"unavailable: {peer.unavailable}"
        elif not (runs / peer.name).is_dir():
            row["status"] = "not run (not installed where the matrix ran)"
        elif not junit.is_file():
            row["status"] = "not judged: its run stopped before any test (pytest wrote no junit XML)"
        else:
            tests, junit_failures = read_junit(junit)
            report = runs / peer.name / "report" / "ulp-drift.json"
            interrupted = report.is_file() and json.loads(report.read_text())["metadata"].get("interrupted")
            status = f"stopped at its time limit after {len(tests)} tests" if interrupted else "judged"
            row = read_run(row, runs / peer.name, tests, junit_failures, status, None)
            suite = ElementTree.parse(junit).getroot()
            suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
            row["seconds"] = round(float(suite.get("time", 0)), 1) if suite is not None else None
        rows[peer.name] = row
    return rows


def publish_runs(peers: Sequence[Peer], runs: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The matrix of an earlier run's folder (``--from-runs``): its rows read from its runs, its environment from the
    project row's report, its reproductions copied and run here, where they show whether they reproduce alone."""
    rows = rows_from_runs(peers, runs / "runs")
    here = f"{platform.machine()} CPU" if not provenance.gpu_names() else provenance.gpu_names()
    for row in rows.values():
        written = []
        for column, _tests in (row.get("failed") or {}).items():
            name = repro_file_name(column)
            source = runs / "repros" / row["peer"] / name
            if source.is_file():
                target = out / "repros" / row["peer"] / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.resolve() != target.resolve():
                    shutil.copyfile(source, target)
                reproduced, output = run_reproduction(target)
                test = _tests[0][0] if _tests else ""
                path = str(target.relative_to(out))
                written.append(Repro(column, test, path, reproduced, output, here).to_json())
        row["repros"] = written
    project = json.loads((runs / "runs" / PROJECT_PEER.name / "report" / "ulp-drift.json").read_text())["metadata"]
    matrix = {
        "schema": SCHEMA,
        "created": project.get("created"),
        "project": {
            "git_commit": project.get("git_commit") or args.commit,
            "git_dirty": project.get("git_dirty"),
            "version": rows[PROJECT_PEER.name].get("installed"),
            "kernel_sha256": project.get("kernel_sha256"),
        },
        "environment": {key: project.get(key) for key in ("python", "torch", "triton", "cuda", "hypothesis", "gpu")},
        "case_size": args.case_size,
        "selection": selection_text(args.smoke),
        "time_limit_s": args.time_limit,
        "reproductions_run_on": here,
        "rows": [rows[peer.name] for peer in peers],
        "speed": {"error": f"not measured in the run read ({runs.name})"},
    }
    speed = runs / "speed.json"
    if speed.is_file():
        matrix["speed"] = json.loads(speed.read_text())
    write_matrix(matrix, out)
    return matrix
