"""Shared pytest configuration for the stepc test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("xdist"):  # `-p no:xdist`: the addopts' xdist options
        group = parser.getgroup("xdist stand-in")
        group.addoption("--numprocesses", dest="numprocesses", default=None,
                        help="ignored without pytest-xdist: the tests run in this process")
        group.addoption("--dist", dest="dist", default="no",
                        help="ignored without pytest-xdist")
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="(Re)write the golden .expect files of tests/golden instead of comparing "
             "against them.",
    )


def _native_sources_built() -> bool:
    """Every Cython source of the checkout has a compiled module at least as new."""
    for source in ROOT.joinpath("stepc").rglob("*.pyx"):
        built = [p.stat().st_mtime for p in source.parent.glob(source.stem + ".*.so")]
        if not built or max(built) < source.stat().st_mtime:
            return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The simulator's native core built in place before the workers start (the tests run
    the checkout, not an installed wheel), when a source changed since the last build;
    without a compiler the tests run the Python core and the native-only tests skip."""
    if hasattr(config, "workerinput") or _native_sources_built():
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    try:
        hook.build_in_place(ROOT)
    except Exception as e:  # no compiler or no Cython: the Python core runs
        config.native_build_error = f"{type(e).__name__}: {e}"


@pytest.fixture(scope="session")
def bundled():
    """The bundled programs compiled and simulated once per session (tests/bundled.py)."""
    from bundled import BundledRuns

    return BundledRuns()


@pytest.fixture
def recorded(monkeypatch):
    """What each Sink of a simulated program receives, by Sink name: installs the recording
    Sink of tests/behavior_harness.py (imported here, so that runs which never simulate do
    not load the simulator)."""
    from behavior_harness import RECORDED, recording_sink

    from stepc.sim.behaviors import BEHAVIORS

    RECORDED.clear()
    monkeypatch.setitem(BEHAVIORS, "Sink", recording_sink(BEHAVIORS["Sink"]))
    return RECORDED


def pytest_terminal_summary(terminalreporter):
    """The torch and transformers versions the from-torch tests ran against, and one line
    naming what is missing when Graphviz or the torch extra is (their tests skip)."""
    import importlib.util
    import shutil
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("torch", "transformers"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} not installed")
    terminalreporter.write_line("from-torch ran against " + ", ".join(found))
    from stepc.sim.native import core_name

    error = getattr(terminalreporter.config, "native_build_error", None)
    terminalreporter.write_line(f"simulator core: {core_name()}" +
                                (f" (the native build failed: {error})" if error else ""))
    if not terminalreporter.stats.get("skipped"):
        return
    missing = []
    if shutil.which("dot") is None:
        missing.append("Graphviz (apt-get install graphviz)")
    if importlib.util.find_spec("torch") is None:
        missing.append("the torch extra (pip install 'stepc[torch]')")
    if missing:
        terminalreporter.write_line(f"note: {' and '.join(missing)} not installed: "
                                    "their tests skipped")
