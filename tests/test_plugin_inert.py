"""The suite's plugin is inert unless asked: installed beside another project, its pytest11 entry point loads it in
that project's sessions, which must get the same header, the same ``-n auto`` worker count, the same Triton compile
hooks and no report as without it; a session that asks for the suite (its tests, its options, its environment
variables) still gets them all.

The other project is a temporary folder run as the entry point would load the plugin (``-p dsv41_rope``, the entry
point's name; ``-p no:dsv41_rope`` blocks it for the run without). A GPU host is faked where the worker count is read
(`dsv41_rope.harness.devices`, the CUDA driver's devices), as in tests/test_backend_devices.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import xdist.plugin

from dsv41_rope import pytest_plugin
from dsv41_rope.harness import backend, devices, under_test
from dsv41_rope.report import run_session

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PLUGIN = pytest_plugin.PLUGIN_NAME
# What the suite's plugin takes on the faked GPU host: 7 GPUs of 80 GiB, 8 workers each (a count no core count of
# xdist's own is likely to match; the tests check that it does not).
GPUS = 7
SUITE_COUNT = 8 * GPUS
# A plugin for the subprocess runs: fakes the GPU host, and prints -n auto's count (xdist decides it in its tryfirst
# pytest_cmdline_main) instead of starting that many workers.
FAKE_GPU_HOST = f"""
import os

from dsv41_rope.harness import devices

os.environ["TRITON_INTERPRET"] = "0"
devices.driver_devices = lambda: tuple(devices.CudaDevice(i, "NVIDIA H100", 80 * 2**30) for i in range({GPUS}))
devices.torch_cuda_version = lambda: "13.0"


def pytest_cmdline_main(config):
    print(f"-n auto: {{config.option.numprocesses}} workers")
    return 0
"""
UNRELATED_TESTS = "def test_unrelated():\n    assert 1 + 1 == 2\n"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable of the suite's, nor xdist's count for -n auto, nor a CI job page."""
    for variable in (under_test.IMPL_VARIABLE, under_test.IN_PLACE_VARIABLE, under_test.CLAIMS_VARIABLE):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)


@pytest.fixture
def fake_gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees 7 compiled-kernel CUDA devices of 80 GiB."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    listed = tuple(devices.CudaDevice(i, "NVIDIA H100", 80 * 2**30) for i in range(GPUS))
    monkeypatch.setattr(devices, "driver_devices", lambda: listed)
    monkeypatch.setattr(devices, "torch_cuda_version", lambda: "13.0")
    assert backend.gpu_workers() == SUITE_COUNT


def xdists_own(config: pytest.Config) -> int:
    """xdist's own -n auto count (a worker per core), which must not be the suite's for these tests to tell them
    apart."""
    own = xdist.plugin.pytest_xdist_auto_num_workers(config)
    assert own != SUITE_COUNT
    return own


@pytest.fixture
def unrelated(tmp_path: Path, clean_environment: None) -> Path:
    """Another project: one plain test, and a folder of its own for the faked GPU host plugin."""
    project = tmp_path / "unrelated"
    project.mkdir()
    (project / "test_unrelated.py").write_text(UNRELATED_TESTS, encoding="utf-8")
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "fake_gpu_host.py").write_text(FAKE_GPU_HOST, encoding="utf-8")
    return project


def run_pytest(project: Path, *args: str, plugin: bool = True, env: dict[str, str] | None = None) -> str:
    """Runs pytest in `project` with the suite's plugin loaded as the entry point loads it (or blocked); its output."""
    paths = [str(REPO), str(project.parent / "helpers"), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})}
    load = ["-p", PLUGIN] if plugin else ["-p", f"no:{PLUGIN}"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *load, *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def header_lines(config: pytest.Config) -> list[str]:
    """The lines every plugin adds to the session header (each gives a line or a list of them)."""
    results = config.hook.pytest_report_header(config=config, start_path=config.rootpath)
    return [line for result in results for line in ([result] if isinstance(result, str) else result)]


def header(output: str) -> list[str]:
    """The session header down to the collection, less the line listing the installed plugins."""
    lines = output.split("collected", 1)[0].splitlines()
    return [line for line in lines if not line.startswith("plugins:")]


def test_another_projects_header_output_and_files_are_unchanged(unrelated: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    with_plugin = run_pytest(unrelated, env={"GITHUB_STEP_SUMMARY": str(summary)})
    without = run_pytest(unrelated, plugin=False)
    assert header(with_plugin) == header(without)
    assert not any("dsv41-rope:" in line for line in header(with_plugin))
    assert "ulp drift" not in with_plugin and "ulp-drift" not in with_plugin
    assert not summary.exists(), "the CI job page got a report of another project's run"
    assert sorted(path.name for path in unrelated.iterdir()) == ["test_unrelated.py"]


def test_another_projects_n_auto_is_xdists_own_on_a_gpu_host(unrelated: Path) -> None:
    fake = ["-p", "fake_gpu_host", "-n", "auto"]
    own = run_pytest(unrelated, *fake, plugin=False)
    assert own.startswith("-n auto: ") and own != f"-n auto: {SUITE_COUNT} workers\n", own
    assert run_pytest(unrelated, *fake) == own
    # The fake GPU host is one: asked for the suite, the same run takes the suite's count.
    assert run_pytest(unrelated, *fake, "--ulp-report", "out") == f"-n auto: {SUITE_COUNT} workers\n"
    asked = run_pytest(unrelated, *fake, env={under_test.IMPL_VARIABLE: "their_rope"})
    assert asked == f"-n auto: {SUITE_COUNT} workers\n"


def test_another_projects_triton_hooks_are_kept(
    pytester: pytest.Pytester, clean_environment: None, fake_gpu_host: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    knobs = pytest.importorskip("triton").knobs

    def their_cache_hook(**kwargs: object) -> bool:
        return False

    def their_post_compile_hook(**kwargs: object) -> None:
        return None

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", their_cache_hook)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", their_post_compile_hook)
    pytester.makepyfile(
        test_hooks="""
        from triton import knobs

        def test_hooks_during_the_run():
            assert knobs.runtime.jit_cache_hook.__name__ == "their_cache_hook"
            assert knobs.runtime.jit_post_compile_hook.__name__ == "their_post_compile_hook"
        """
    )
    for load in (PLUGIN, f"no:{PLUGIN}"):
        pytester.runpytest("-p", load).assert_outcomes(passed=1)
        assert knobs.runtime.jit_cache_hook is their_cache_hook, load
        assert knobs.runtime.jit_post_compile_hook is their_post_compile_hook, load


def test_another_projects_run_builds_no_report(
    pytester: pytest.Pytester, clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []
    real = run_session.finished_report
    monkeypatch.setattr(run_session, "finished_report", lambda *a, **k: built.append(1) or real(*a, **k))
    pytester.makepyfile(test_unrelated=UNRELATED_TESTS)
    result = pytester.runpytest("-p", PLUGIN)
    result.assert_outcomes(passed=1)
    assert not built, "another project's session built a report (its provenance runs git)"
    assert pytester.runpytest("-p", PLUGIN, "--ulp-report", "out").ret == pytest.ExitCode.OK
    assert built and (pytester.path / "out" / "ulp-drift.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        [str(under_test.SUITE_DIRECTORY)],
        [f"{under_test.SUITE_DIRECTORY / 'test_forward_bits.py'}::test_fused_equals_oracle"],
        [str(under_test.SUITE_DIRECTORY.parent)],
        ["--pyargs", "dsv41_rope.conformance"],
        ["--pyargs", "dsv41_rope.conformance.test_forward_bits"],
        ["--pyargs", "dsv41_rope"],
    ],
    ids=["folder", "node", "package-folder", "pyargs", "pyargs-module", "pyargs-package"],
)
def test_the_suites_own_run_gets_its_header_and_worker_count(
    pytester: pytest.Pytester, clean_environment: None, fake_gpu_host: None, args: list[str]
) -> None:
    config = pytester.parseconfigure("-p", PLUGIN, "--noconftest", *args)
    assert under_test.suite_requested(config)
    lines = header_lines(config)
    assert any(line.startswith("dsv41-rope: judging") for line in lines), lines
    assert config.hook.pytest_xdist_auto_num_workers(config=config) == SUITE_COUNT


def test_xdists_variable_still_names_the_suites_count(
    pytester: pytest.Pytester, clean_environment: None, fake_gpu_host: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    config = pytester.parseconfigure("-p", PLUGIN, "--noconftest", str(under_test.SUITE_DIRECTORY))
    assert config.hook.pytest_xdist_auto_num_workers(config=config) == 3


def test_an_unrelated_session_gets_xdists_count_and_no_header(
    pytester: pytest.Pytester, clean_environment: None, fake_gpu_host: None
) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED_TESTS)
    config = pytester.parseconfigure("-p", PLUGIN)
    assert not under_test.suite_requested(config)
    lines = header_lines(config)
    assert not any("dsv41-rope:" in line for line in lines), lines
    assert config.hook.pytest_xdist_auto_num_workers(config=config) == xdists_own(config)


@pytest.mark.parametrize(
    ("args", "env", "asked"),
    [
        ([], {}, False),
        (["test_unrelated.py"], {}, False),
        (["--pyargs", "dsv41_rope.report"], {}, False),
        (["--ulp-report", "out"], {}, True),
        (["--ulp-baseline", "base.json"], {}, True),
        (["--ulp-save-baseline", "base.json"], {}, True),
        (["--ulp-baseline-strict"], {}, True),
        (["--ulp-tolerance", "0.5"], {}, True),
        (["--rope-impl", "their_rope"], {}, True),
        (["--rope-impl-claims", "none"], {}, True),
        ([], {under_test.IMPL_VARIABLE: "their_rope"}, True),
        ([], {under_test.IN_PLACE_VARIABLE: "their_rope:in_place"}, True),
        ([], {under_test.CLAIMS_VARIABLE: "none"}, True),
        ([], {under_test.IMPL_VARIABLE: ""}, False),
    ],
)
def test_what_asks_for_the_suite(
    pytester: pytest.Pytester,
    clean_environment: None,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    asked: bool,
) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED_TESTS)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    config = pytester.parseconfig("-p", PLUGIN, *args)  # parsed only: an implementation named is not imported
    assert under_test.suite_requested(config) is asked


def test_a_suite_inside_a_virtualenv_is_not_the_projects(
    pytester: pytest.Pytester, clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite installed in a project's own virtualenv: pytest does not collect it from the project's folder."""
    venv = pytester.path / "venv"
    suite = venv / "lib" / "python3.11" / "site-packages" / "dsv41_rope" / "conformance"
    suite.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    monkeypatch.setattr(under_test, "SUITE_DIRECTORY", suite)
    assert not under_test.suite_requested(pytester.parseconfig("-p", PLUGIN))
    assert not under_test.suite_requested(pytester.parseconfig("-p", PLUGIN, str(venv)))
    assert under_test.suite_requested(pytester.parseconfig("-p", PLUGIN, str(suite)))


def checkout_pytest(*args: str) -> subprocess.CompletedProcess[str]:
    """pytest in the checkout with no entry point loaded, so that only the root conftest can register the plugin."""
    environment = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)


def test_the_entry_point_has_the_name_that_p_no_takes() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    entry_points = pyproject["project"]["entry-points"]["pytest11"]
    expected = {PLUGIN: "dsv41_rope.pytest_plugin"}
    assert entry_points == expected, f"got {entry_points}, expected {expected}: -p no:{PLUGIN} blocks it by name"


def test_the_checkouts_conftest_registers_the_plugin_unless_p_no_blocks_it() -> None:
    loaded = checkout_pytest("--help")
    assert loaded.returncode == 0 and "--rope-impl" in loaded.stdout, loaded.stdout[-2000:] + loaded.stderr[-2000:]
    blocked = checkout_pytest("-p", f"no:{PLUGIN}", "--rope-impl", "their_rope", "--co", "tests/test_install_lines.py")
    assert blocked.returncode == pytest.ExitCode.USAGE_ERROR, f"got exit {blocked.returncode}, expected 4 (usage error)"
    assert "unrecognized arguments: --rope-impl" in blocked.stderr, blocked.stderr[-2000:]
