"""Shared pytest configuration for the stepc test suite."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="(Re)write the golden .expect files of tests/golden instead of comparing "
             "against them.",
    )
