"""The use case of the MCP `estimate` tool: a program's cycles at rising fidelity, the
roofline lower bound (analysis only) then memory models (simulations), each beside its
measured error on the paper's SwiGLU sweep."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepc.api import InputError
from stepc.app.reference import FIDELITY_SOURCE, fidelity

if TYPE_CHECKING:
    from stepc.api import Program


@dataclass
class Estimates:
    """A program's estimates, cheapest model first; `missing` says why the measured errors
    are not given (None: they are)."""

    program: str
    hw: str
    estimates: list[dict]  # model, kind, cycles, bound, error, and what `note` says
    missing: str | None

    def to_dict(self, shown: Callable[[Any], Any] = str) -> dict:
        """The tool's answer; `shown(value)` is a symbolic value's text in a note."""
        out = []
        for e in self.estimates:
            if e["model"] == "roofline":
                known = e["bound"] != "unknown"
                note = ("no simulation: the larger of the analysis's memory and compute "
                        "cycles, a bound every simulated model meets" if known else
                        "symbolic in dims only a run or a trace fixes (give `traces`): memory "
                        f"{shown(e['memory_cycles'])}, compute {shown(e['compute_cycles'])} "
                        "cycles")
            else:
                note = (f"the {e['model']} memory model on {e['hw']}"
                        + (f"; {self.missing}" if self.missing else ""))
            out.append({"model": e["model"], "kind": e["kind"], "cycles": e["cycles"],
                        "energy_j": e["energy_j"], "bound": e["bound"], "error": e["error"],
                        "note": note})
        return {"program": self.program, "hw": self.hw, "estimates": out,
                "error_source": self.missing or FIDELITY_SOURCE}


def estimate(prog: Program, models: Sequence[str], hw: str,
             traces: dict[str, str] | None = None, hw_name: str | None = None) -> Estimates:
    """`prog`'s cycles under each of `models` (`roofline`, or a memory model's name) in
    the given order on `hw`, named `hw_name` in the answer (default: `hw`)."""
    try:
        errors, missing = fidelity(), None
    except InputError as e:
        errors, missing = {}, f"the measured errors are missing: {e}"
    out: list[dict] = []
    for model in models:
        if model == "roofline":
            cost = prog.analyze(hw=hw, traces=traces)
            roof = cost.roofline
            known = roof["bound"] != "unknown"
            joules = cost.to_dict(energy=True)["energy"]["lower_bound_joules"]
            out.append({"model": "roofline", "kind": "lower bound",
                        "cycles": max(roof["memory_cycles"], roof["compute_cycles"])
                        if known else None, "bound": roof["bound"], "error": [],
                        "memory_cycles": roof["memory_cycles"],
                        "compute_cycles": roof["compute_cycles"],
                        "energy_j": joules if isinstance(joules, float) else None})
            continue
        run = prog.simulate(hw=hw, set={"hbm.model": model}, traces=traces, timing_only=True)
        out.append({"model": model, "kind": "simulated", "cycles": run.cycles, "bound": None,
                    "error": errors.get(model, []), "hw": run.hw,
                    "energy_j": run.metrics["energy_j"]})
    return Estimates(prog.name, hw_name or hw, out, missing)
