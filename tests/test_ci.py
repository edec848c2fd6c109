"""The gate's CI: the workflow files parse and hang together (jobs, needs, the shard matrix, artifact names, the
reusable workflow's inputs), every command they run is a script of this repository, and the scripts do what the
workflows rely on (`.ci/groups`, `.ci/shard`, `.ci/merge`), on the CPU. The workflows are safe to hand to other
repositories' self-hosted runners (actions pinned by commit, no credential left in the workspace, a read-only token),
and CI audits them with zizmor and GitHub's workflow schema before the tests (`.ci/lint-workflows`), after ruff.
The speed gate's job, `.ci/lint-python` and `./run --help`: tests/test_ci_gates.py."""

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

from dsv41_rope.report import merge_cli

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
REUSABLE = "conformance-reusable.yml"
WORKFLOW_NAMES = ["conformance.yml", REUSABLE]
# `uses: owner/repo[/path]@<40-hex commit> # vX.Y.Z`, as a line of a workflow file (YAML drops the comment).
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?:\s+#\s*(?P<comment>.*?))?\s*$")
PINNED = re.compile(r"^(?P<action>[\w.-]+/[\w.-]+(?:/[\w./-]+)?)@(?P<sha>[0-9a-f]{40})$")
RELEASE = re.compile(r"^v\d+\.\d+\.\d+$")


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


def uses_lines(name: str) -> list[re.Match[str]]:
    """Every `uses:` line of a workflow file, steps' and jobs', with its trailing comment."""
    lines = (WORKFLOWS / name).read_text(encoding="utf-8").splitlines()
    return [match for line in lines if (match := USES_LINE.match(line))]


def all_uses(name: str) -> list[str]:
    """Every `uses:` value of a workflow as YAML reads it: the jobs' (reusable workflows) and their steps'."""
    jobs = workflow(name)[0]["jobs"].values()
    called = [job["uses"] for job in jobs if "uses" in job]
    return called + [step["uses"] for job in jobs for step in job.get("steps", []) if "uses" in step]


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
            scripts |= set(re.findall(r"(?:^|[\s(\"])((?:\./|\.ci/|tools/)[\w./-]+)", run))
    assert scripts == {".ci/run", ".ci/groups", ".ci/shard", ".ci/merge", ".ci/speed-gate"}
    for script in scripts | {"run"}:
        path = REPO / script
        assert path.is_file() and os.access(path, os.X_OK), script


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_release_in_a_comment() -> None:
    # A tag can be moved to other code; a commit cannot. The comment says which release the commit is.
    pins: dict[str, set[tuple[str, str]]] = {}
    for name in WORKFLOW_NAMES:
        lines = uses_lines(name)
        assert sorted(m["ref"] for m in lines) == sorted(all_uses(name))  # the line scan saw every `uses:`
        for match in lines:
            if match["ref"] == f"./.github/workflows/{REUSABLE}" and name == "conformance.yml":
                continue  # this repository's own reusable workflow, at the caller's commit (see .github/zizmor.yml)
            pinned = PINNED.match(match["ref"])
            assert pinned, f"{name}: {match['ref']} is not pinned to a 40-hex commit"
            assert match["comment"] and RELEASE.match(match["comment"]), f"{name}: {match['ref']} names no release"
            pins.setdefault(pinned["action"], set()).add((pinned["sha"], match["comment"]))
    assert set(pins) == {
        "actions/checkout",
        "actions/setup-python",
        "actions/upload-artifact",
        "actions/download-artifact",
    }
    assert all(len(commits) == 1 for commits in pins.values()), pins  # one commit and release an action, everywhere


def test_every_checkout_leaves_no_credential_in_the_workspace() -> None:
    # By default actions/checkout writes the token into .git/config, readable by the code under test and by uploads.
    checkouts = [
        step
        for name in WORKFLOW_NAMES
        for job in workflow(name)[0]["jobs"].values()
        for step in steps(job, "actions/checkout")
    ]
    assert len(checkouts) == 6
    assert all(step["with"]["persist-credentials"] is False for step in checkouts), checkouts


@pytest.mark.parametrize("name", WORKFLOW_NAMES)
def test_the_token_gets_nothing_by_default_and_each_job_reads_the_repository_only(name: str) -> None:
    data, _ = workflow(name)
    assert data["permissions"] == {}
    # The checkouts need contents: read; for the gpu job it is also the most the called workflow's jobs may get.
    assert {job_name: job.get("permissions") for job_name, job in data["jobs"].items()} == {
        job_name: {"contents": "read"} for job_name in data["jobs"]
    }


def test_zizmor_ignores_only_the_self_repository_call_and_says_why() -> None:
    config_text = (REPO / ".github" / "zizmor.yml").read_text(encoding="utf-8")
    assert yaml.safe_load(config_text) == {"rules": {"self-repository": {"ignore": ["conformance.yml"]}}}
    reason = config_text.split("self-repository:")[1].split("ignore:")[0]
    assert reason.count("#") >= 3 and "caller's own commit" in reason
    # The reason holds while the only local reference is conformance.yml's call of the reusable workflow; the
    # reusable workflow, run for other repositories, has none (a `./` action there would be the caller's code).
    assert [ref for ref in all_uses("conformance.yml") if ref.startswith((".", "$"))] == [
        f"./.github/workflows/{REUSABLE}"
    ]
    assert [ref for ref in all_uses(REUSABLE) if ref.startswith((".", "$"))] == []


def test_ci_audits_the_workflows_before_the_tests() -> None:
    ci_commands = [
        line
        for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    # ruff first: the quickest check, and the one most changes trip.
    assert ci_commands == [
        ".ci/lint-python",
        ".ci/lint-workflows",
        "./run tests --junitxml=reports/junit.xml",
        ".ci/smoke-torch-newest",  # tests/test_ci_tox.py
    ]
    lint = (REPO / ".ci" / "lint-workflows").read_text(encoding="utf-8")
    assert "set -euo pipefail" in lint
    assert '-m pip install -q "zizmor==$zizmor_version" "check-jsonschema==$check_jsonschema_version"' in lint
    assert lint_pins()["zizmor"] == "1.33.1" and re.fullmatch(r"\d+\.\d+\.\d+", lint_pins()["check_jsonschema"])


def lint_pins() -> dict[str, str]:
    """The tool versions .ci/lint-workflows installs, {"zizmor": "1.33.1", "check_jsonschema": ...}."""
    lint = (REPO / ".ci" / "lint-workflows").read_text(encoding="utf-8")
    return dict(re.findall(r"^(\w+)_version=(\S+)$", lint, flags=re.MULTILINE))


def fake_lint_tools(tmp_path: Path, zizmor_status: int, schema_status: int) -> tuple[Path, Path]:
    """A venv of stand-ins for the pinned zizmor and check-jsonschema that log their arguments and exit as told."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    pins = lint_pins()
    for tool, version, status in (
        ("zizmor", f"zizmor {pins['zizmor']}", zizmor_status),
        ("check-jsonschema", f"check-jsonschema, version {pins['check_jsonschema']}", schema_status),
    ):
        script = bin_dir / tool
        script.write_text(
            f'#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "{version}"; exit 0; fi\n'
            f'echo "{tool} $*" >> "{log}"\nexit {status}\n'
        )
        script.chmod(0o755)
    return tmp_path / "venv", log


@pytest.mark.parametrize(
    ("zizmor_status", "schema_status", "expected_status", "tools_run"),
    [
        (0, 0, 0, 2),  # no finding, schema valid
        (14, 0, 14, 1),  # a high-severity finding (an unpinned action): fails before anything else
        (12, 0, 12, 1),  # a low-severity finding alone fails too
        (0, 1, 1, 2),  # a schema error
    ],
)
def test_lint_workflows_runs_zizmor_and_the_schema_check_and_any_finding_fails(
    tmp_path: Path, zizmor_status: int, schema_status: int, expected_status: int, tools_run: int
) -> None:
    venv, log = fake_lint_tools(tmp_path, zizmor_status, schema_status)
    done = subprocess.run(
        [".ci/lint-workflows"],
        cwd=REPO,
        env={**os.environ, "DSV41_LINT_VENV": str(venv)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == expected_status, done.stdout + done.stderr
    assert "installing" not in done.stdout  # the pinned versions were there
    calls = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(calls) == tools_run
    assert calls[0] == ["zizmor", "--offline", "--strict-collection", ".github/workflows/"]
    if tools_run == 2:  # the shell's glob, in its locale's order: every workflow file
        assert calls[1][:3] == ["check-jsonschema", "--builtin-schema", "vendor.github-workflows"]
        assert sorted(calls[1][3:]) == sorted(f".github/workflows/{name}" for name in WORKFLOW_NAMES)


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
    assert lost.returncode == merge_cli.EXIT_INCOMPLETE == 11
    assert "cpu: group 2 of 2 missing: it should have held 3 tests" in page.read_text(encoding="utf-8")

    shutil.rmtree(downloaded / "ulp-drift-shard-1")
    nothing = merge_job(downloaded)
    assert nothing.returncode == merge_cli.EXIT_INCOMPLETE and "all 2 shards were lost" in nothing.stderr
    assert "all 2 shards were lost" in page.read_text(encoding="utf-8")
    # download-artifact makes no folder when no artifact matched: the same verdict, not a failing `cd`.
    shutil.rmtree(downloaded)
    absent = merge_job(downloaded)
    assert absent.returncode == merge_cli.EXIT_INCOMPLETE and "all 2 shards were lost" in absent.stderr


def test_the_merge_job_tells_its_verdicts_from_usage_errors_and_pytest_statuses() -> None:
    # 2 is a usage error (argparse's, and the scripts'); 1-5 are pytest's, which the shards' logs show beside them.
    statuses = {merge_cli.EXIT_BAD_INPUT, merge_cli.EXIT_INCOMPLETE, merge_cli.EXIT_INCONSISTENT}
    assert len(statuses) == 3 and statuses.isdisjoint(range(6))
    assert merge_cli.EXIT_REGRESSION == pytest.ExitCode.TESTS_FAILED  # a failing gate, like the suite's own
    script = (REPO / ".ci" / "merge").read_text(encoding="utf-8")
    assert f"exit_incomplete={merge_cli.EXIT_INCOMPLETE}  #" in script
    for status in (*statuses, merge_cli.EXIT_REGRESSION):
        assert f" {status} " in script.split("set -euo")[0]  # the header comment names each
        assert f"\n  {status} " in merge_cli.EXIT_STATUS_HELP
    usage = subprocess.run([".ci/merge", "shards"], cwd=REPO, capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "usage: .ci/merge" in usage.stderr
