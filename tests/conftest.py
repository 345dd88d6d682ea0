"""Shared pytest configuration for the stepc test suite."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="(Re)write the golden .expect files of tests/golden instead of comparing "
             "against them.",
    )


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
