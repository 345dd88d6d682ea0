"""Which figures the reproduction knows: one spec file each under `experiments/`. Light on
purpose (help texts list the figures without loading the reproduction)."""

from __future__ import annotations

from importlib import resources


def specs():
    """The directory of the figures' spec files."""
    return resources.files("stepc") / "reproduction" / "experiments"


def available_figures() -> list[str]:
    """The figures, in the paper's order."""
    return sorted((p.name.removeprefix("fig").removesuffix(".toml") for p in specs().iterdir()
                   if p.name.startswith("fig") and p.name.endswith(".toml")),
                  key=lambda s: (len(s), s))
