"""An Analysis as the JSON document of `stepc analyze --format json` (its text report is
drawn by stepc.report.analyze)."""

from __future__ import annotations

from stepc.analyze.analysis import Analysis, Roofline
from stepc.diagnostics import span_json
from stepc.hw import HardwareConfig
from stepc.schemas import schema
from stepc.types import dim_json


def to_json(a: Analysis, hw: HardwareConfig | None = None, roof: Roofline | None = None
            ) -> dict:
    out = {
        "schema": schema("analyze"),
        "program": a.program,
        "onchip_model": a.mode,
        "params": dict(sorted(a.params.items())),
        "bindings": {k: dim_json(v) for k, v in sorted(a.bindings.items())},
        "ops": [{
            "name": o.node, "op": o.op,
            "location": span_json(o.span),
            "off_chip_bytes": dim_json(o.off_chip), "on_chip_bytes": dim_json(o.on_chip),
            "on_chip_bytes_on_demand": dim_json(o.on_chip_on_demand),
            "flops": dim_json(o.flops), "compute_bw": o.compute_bw,
        } for o in a.ops],
        "totals": {k: dim_json(v) for k, v in a.totals.items()},
        "symbols": {info.name: {"kind": info.kind, "origin": info.origin,
                                "reason": info.reason,
                                "location": span_json(info.span)}
                    for info in a.symbols.values()},
    }
    if roof is not None and hw is not None:
        out["roofline"] = {"hw": hw.name, "memory_cycles": dim_json(roof.memory_cycles),
                           "compute_cycles": dim_json(roof.compute_cycles),
                           "allocated_compute": a.allocated_compute, "bound": roof.bound,
                           "offchip_bw": hw.peak_bw}
    return out
