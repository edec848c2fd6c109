"""The gate's CI: the workflow files parse and hang together (jobs, needs, the shard matrix, artifact names, the
reusable workflow's inputs), every command they run is a script of this repository, and the scripts do what the
workflows rely on (`.ci/groups`, `.ci/shard`, `.ci/merge`), on the CPU."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
REUSABLE = "conformance-reusable.yml"


def workflow(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns a workflow and its triggers (YAML 1.1 reads the key `on` as True)."""
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    return data, data.get("on", data.get(True))


def steps(job: dict[str, Any], uses: str) -> list[dict[str, Any]]:
    """The steps of a job that use an action, e.g. "actions/upload-artifact"."""
    return [step for step in job.get("steps", []) if step.get("uses", "").startswith(uses + "@")]


def runs(name: str) -> list[str]:
    """Every `run:` command of a workflow."""
    data, _ = workflow(name)
    return [step["run"] for job in data["jobs"].values() for step in job.get("steps", []) if "run" in step]


def command(name: str, script: str) -> list[str]:
    """The words of the one command of a workflow that runs `script`."""
    found = [shlex.split(run) for run in runs(name) if script in run]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("name", ["conformance.yml", REUSABLE])
def test_workflows_parse_and_their_jobs_need_existing_jobs(name: str) -> None:
    data, triggers = workflow(name)
    jobs = data["jobs"]
    assert jobs and triggers
    for job_name, job in jobs.items():
        needs = job.get("needs", [])
        assert set([needs] if isinstance(needs, str) else needs) <= set(jobs) - {job_name}
        assert ("runs-on" in job) != ("uses" in job), job_name


def test_the_cpu_job_runs_what_ci_runs_on_every_pull_request() -> None:
    data, triggers = workflow("conformance.yml")
    assert "pull_request" in triggers
    assert [step["run"] for step in data["jobs"]["cpu"]["steps"] if "run" in step] == ["bash .ci/run"]
    assert "./run tests" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_gpu_job_calls_the_reusable_workflow_with_declared_inputs() -> None:
    data, _ = workflow("conformance.yml")
    gpu = data["jobs"]["gpu"]
    assert gpu["uses"] == f"./.github/workflows/{REUSABLE}"
    _, triggers = workflow(REUSABLE)
    inputs = triggers["workflow_call"]["inputs"]
    assert {"implementation", "shards", "runner"} <= set(inputs)
    assert inputs["shards"]["type"] == "number" and inputs["runner"]["type"] == inputs["implementation"]["type"]
    assert set(gpu["with"]) <= set(inputs)
    assert all(not spec.get("required") or key in gpu["with"] for key, spec in inputs.items())


def test_shards_are_a_matrix_of_the_planned_groups_on_the_runner_label() -> None:
    data, _ = workflow(REUSABLE)
    plan, shard, merge = (data["jobs"][name] for name in ("plan", "shard", "merge"))
    assert plan["outputs"]["groups"] == "${{ steps.groups.outputs.groups }}"
    assert any(step.get("id") == "groups" and ".ci/groups" in step["run"] for step in plan["steps"])
    assert shard["needs"] == "plan"
    assert shard["strategy"]["matrix"]["group"] == "${{ fromJSON(needs.plan.outputs.groups) }}"
    assert shard["strategy"]["fail-fast"] is False  # one regressed shard must not cancel the others
    assert "${{ inputs.runner }}" in shard["runs-on"] and "self-hosted" in shard["runs-on"]
    assert shard["env"]["DSV41_ROPE_IMPL"] == "${{ inputs.implementation }}"
    assert set(merge["needs"]) == {"plan", "shard"} and "!cancelled()" in merge["if"]


def test_artifact_names_and_folders_agree_between_upload_and_download() -> None:
    data, _ = workflow(REUSABLE)
    shard, merge = data["jobs"]["shard"], data["jobs"]["merge"]
    [upload] = steps(shard, "actions/upload-artifact")
    [download] = steps(merge, "actions/download-artifact")
    names = [upload["with"]["name"].replace("${{ matrix.group }}", str(group)) for group in range(1, 9)]
    assert len(set(names)) == 8 and all(fnmatch.fnmatch(name, download["with"]["pattern"]) for name in names)
    assert upload["if"] == "always()"  # a failing shard's report is the one to read
    shard_words = command(REUSABLE, ".ci/shard")
    assert upload["with"]["path"].rstrip("/") == shard_words[3]  # .ci/shard GROUP SPLITS OUT_DIR
    merge_words = command(REUSABLE, ".ci/merge")
    assert merge_words[1:3] == [download["with"]["path"], "merged"]  # .ci/merge SHARDS_DIR OUT_DIR SPLITS
    [merged_upload] = steps(merge, "actions/upload-artifact")
    assert merged_upload["with"]["path"].rstrip("/") == merge_words[2]


def test_every_command_is_a_script_of_the_repository() -> None:
    scripts = set()
    for name in ("conformance.yml", REUSABLE):
        for run in runs(name):
            scripts |= set(re.findall(r"(?:^|[\s(\"])((?:\./|\.ci/|scripts/)[\w./-]+)", run))
    assert scripts == {".ci/run", ".ci/groups", ".ci/shard", ".ci/merge"}
    for script in scripts | {"run"}:
        path = REPO / script
        assert path.is_file() and os.access(path, os.X_OK), script


def test_groups_are_the_matrix_of_a_split() -> None:
    done = subprocess.run([".ci/groups", "4"], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [1, 2, 3, 4]
    assert subprocess.run([".ci/groups", "0"], cwd=REPO, capture_output=True, check=False).returncode == 2


def test_a_shard_passes_its_group_and_the_implementation_to_the_suite(tmp_path: Path) -> None:
    fake_run = tmp_path / "fake-run"
    fake_run.write_text('#!/usr/bin/env bash\necho "args: $*"\necho "report: $DSV41_REPORT impl: $DSV41_ROPE_IMPL"\n')
    fake_run.chmod(0o755)
    env = {**os.environ, "DSV41_RUN": str(fake_run), "DSV41_ROPE_IMPL": "my_rope.kernels:apply"}
    done = subprocess.run(
        [".ci/shard", "2", "4", str(tmp_path / "out"), "-x"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert (
        f"args: conformance --splits 4 --group 2 --junitxml {out}/junit.xml --rope-impl my_rope.kernels:apply -x"
        in (done.stdout)
    )
    assert f"report: {out} impl: my_rope.kernels:apply" in done.stdout

    refused = subprocess.run(
        [".ci/shard", "1", "4", str(out)],
        cwd=REPO,
        env={**env, "DSV41_REQUIRE_CUDA": "1", "DSV41_PYTHON": sys.executable},
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "has no CUDA torch" in refused.stderr
    assert "args:" not in refused.stdout


SHARD_TESTS = """
import pytest


@pytest.mark.parametrize("n", range(6))
def test_case(ulp_drift, n):
    ulp_drift.record(comparison="fused-vs-eager", dtype="float32", backend="triton", device="cpu", elements=8,
                     mismatches=0)
"""


def test_the_merge_job_merges_gates_and_writes_the_job_page(report_project: pytest.Pytester, tmp_path: Path) -> None:
    report_project.makepyfile(test_shard=SHARD_TESTS)
    assert report_project.runpytest("--ulp-save-baseline", "base.json").ret == pytest.ExitCode.OK
    downloaded = tmp_path / "shards"  # as download-artifact lays them out: one folder an artifact
    for group in (1, 2):
        result = report_project.runpytest("--splits", "2", "--group", str(group), "--ulp-report", f"s{group}")
        assert result.ret == pytest.ExitCode.OK
        shutil.copytree(report_project.path / f"s{group}", downloaded / f"ulp-drift-shard-{group}")
    page = tmp_path / "step-summary.md"
    env = {
        **os.environ,
        "DSV41_PYTHON": sys.executable,
        "DSV41_BASELINE": str(report_project.path / "base.json"),
        "GITHUB_STEP_SUMMARY": str(page),
    }

    def merge_job(shards: Path) -> subprocess.CompletedProcess[str]:
        out = tmp_path / "merged"
        return subprocess.run(
            [".ci/merge", str(shards), str(out), "2"], cwd=REPO, env=env, capture_output=True, text=True
        )

    done = merge_job(downloaded)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p.name for p in (tmp_path / "merged").iterdir()} >= {"ulp-drift.json", "ulp-drift.md"}
    text = page.read_text(encoding="utf-8")
    assert "ulp-drift verdict: PASS - 6 cases" in text and "Completeness: **complete**." in text
    assert "0 regressed, 0 new, 0 missing" in text

    shutil.rmtree(downloaded / "ulp-drift-shard-2")
    lost = merge_job(downloaded)
    assert lost.returncode == 3
    assert "cpu: group 2 of 2 missing: it should have held 3 tests" in page.read_text(encoding="utf-8")

    shutil.rmtree(downloaded / "ulp-drift-shard-1")
    nothing = merge_job(downloaded)
    assert nothing.returncode == 3 and "all 2 shards were lost" in nothing.stderr
    assert "all 2 shards were lost" in page.read_text(encoding="utf-8")


def test_worker_scaling_times_each_count_and_skips_what_the_budget_cannot_hold(tmp_path: Path) -> None:
    # A stand-in for ./run: one worker finishes at once, two take longer than the budget (stopped by SIGINT).
    fake_run = tmp_path / "fake-run"
    fake_run.write_text(
        '#!/usr/bin/env bash\nfor a in "$@"; do [ "$prev" = -n ] && n=$a; prev=$a; done\n'
        'echo "$* report $DSV41_REPORT"\nif [ "$n" = 2 ]; then sleep 60; fi\n'
    )
    fake_run.chmod(0o755)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "scripts.worker_scaling", "--out", str(out), "--counts", "1,2,4", "--budget", "4"]
    done = subprocess.run(
        [*command, "--min-seconds", "1", "--run", str(fake_run), "--", "-k", "bf16"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["workers"]: r for r in json.loads((out / "workers.json").read_text(encoding="utf-8"))}
    assert results[1]["status"] == 0 and results[1]["full_suite_s"] == pytest.approx(8 * results[1]["wall_s"], abs=0.1)
    assert results[2]["status"] is None and results[2]["full_suite_s"] is None  # the budget stopped it
    assert results[4] == {"workers": 4, "skipped": True}
    assert "budget of 4 s spent: worker counts [4] not timed" in done.stdout
    log = (out / "workers-1.log").read_text(encoding="utf-8")
    assert f"conformance -q -p no:cacheprovider -n 1 --splits 8 --group 1 -k bf16 report {out}/workers-1" in log
