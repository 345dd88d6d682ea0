"""The machine a benchmark ran on, printed with its figures: the load average (1, 5 and
15 minutes) and the core count. Every speed figure quoted in the docs names its script and
this line's load, since the development machine is shared and its load moves the figures."""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, `1.23 / 0.98 / 0.75`, read when called."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_line() -> str:
    """`load average 1.23 / 0.98 / 0.75 on 2 cores`, read when called."""
    return f"load average {load_average()} on {os.cpu_count()} cores"
