"""The tools' declarations: name, description, JSON Schema of the arguments and of the
structured result (clients validate results against it)."""

from __future__ import annotations

from stepc.hw.memory import by_cost, confirming_models

INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
NUM = {"type": "number"}
NUM_OR_NULL = {"type": ["number", "null"]}
ANY_OBJECT = {"type": "object"}
LIST = {"type": "array"}
LADDER = ("roofline", *by_cost())  # the estimate's fidelities, cheapest first

PROGRAM = {
    "program": {**STR, "description": "The program's .step text (or give `path`)."},
    "path": {**STR, "description": "A .step file (or a STeP IR graph .pb) under the "
             "workspace root (or give `program`)."},
    "name": {**STR, "description": "With `program`: the file name its diagnostics carry "
             "and its imports resolve beside (default program.step)."},
    "params": {"type": "object", "additionalProperties": INT,
               "description": "Overrides of the program's `param`s, e.g. {\"TB\": 32}."},
}
PAGE = {
    "offset": {**INT, "minimum": 0, "description": "First list item to return (default 0)."},
    "limit": {**INT, "minimum": 1, "maximum": 1000,
              "description": "List items to return (default 100)."},
}
PAGE_INFO = {"type": "object", "required": ["total", "offset", "returned", "next_offset"],
             "properties": {"total": INT, "offset": INT, "returned": INT,
                            "next_offset": {"type": ["integer", "null"]}}}
HW = {"hw": {**STR, "description": "Hardware preset (paper-eval, hdl-validation, "
             "hdl-validation-dram, hdl-like) or a TOML file in the workspace; default "
             "paper-eval."}}
TRACES = {"traces": {"type": "object", "additionalProperties": STR,
                     "description": "External stream -> trace file in the workspace "
                     "(.npy, .npz, .csv), e.g. {\"routing\": \"ids.npy\"}."}}
TIME_LIMIT = {"time_limit": {"type": "number", "exclusiveMinimum": 0,
                             "description": "Wall-time limit of this call in seconds (at most "
                             "the server's limit, which is also the default)."}}
SPAN = {"type": ["object", "null"], "properties": {
    "file": STR, "line": INT, "column": INT, "end_line": INT, "end_column": INT}}
DIAGNOSTIC = {"type": "object", "required": ["code", "severity", "message", "location"],
              "properties": {"code": STR, "severity": STR, "message": STR, "location": SPAN,
                             "notes": LIST}}


def _obj(properties: dict, required: tuple = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required)}


def _args(properties: dict, required: tuple = ()) -> dict:
    """A tool's arguments: an argument it does not take is refused, not ignored."""
    return {**_obj(properties, required), "additionalProperties": False}


TOOLS: dict[str, dict] = {
    "check": {
        "description": "Parse, elaborate and type/shape-check a .step program: every "
        "diagnostic (code, severity, message, location span, notes) and every stream's "
        "inferred type and symbolic shape (paged by offset/limit), and the symbols.",
        "input": _args({**PROGRAM, **PAGE, **TIME_LIMIT}),
        "output": _obj({"program": STR, "ok": BOOL, "summary": ANY_OBJECT,
                        "diagnostics": {"type": "array", "items": DIAGNOSTIC},
                        "unknown_params": LIST, "streams": LIST, "streams_page": PAGE_INFO,
                        "symbols": LIST},
                       ("program", "ok", "diagnostics", "streams", "streams_page")),
    },
    "analyze": {
        "description": "Symbolic cost analysis: off-chip traffic, on-chip memory, FLOPs and "
        "operational intensity in total and per statement or operator instance (paged), "
        "symbolic in "
        "the dynamic dims unless `bind` or `traces` fix them; with `hw` the roofline "
        "bound.",
        "input": _args({**PROGRAM, **HW, **TRACES, **PAGE, **TIME_LIMIT,
                       "bind": {"type": "object", "additionalProperties": INT,
                                "description": "Dims to values, e.g. {\"D_0\": 12}."},
                       "onchip_model": {"enum": ["artifact", "paper"]},
                       "by": {"enum": ["statement", "operator"],
                              "description": "Rows per statement (a loop's iterations "
                              "summed; the default) or per operator instance."}}),
        "output": _obj({"program": STR, "totals": ANY_OBJECT, "ops": LIST,
                        "ops_page": PAGE_INFO, "roofline": {"type": ["object", "null"]},
                        "bindings": ANY_OBJECT, "symbols": ANY_OBJECT, "warnings": LIST},
                       ("program", "totals", "ops", "ops_page")),
    },
    "simulate": {
        "description": "Cycle-approximate simulation: the measurement record (cycles, "
        "off-chip bytes, FLOPs, on-chip bytes, utilizations, memory model), the dims the "
        "run determined and the busiest operators. Timing-only by default; a deadlock or a "
        "run past its time limit is a tool error.",
        "input": _args({**PROGRAM, **HW, **TRACES, **TIME_LIMIT,
                       "set": {"type": "object", "description": "Hardware overrides, e.g. "
                               "{\"hbm.model\": \"fluid\"}."},
                       "timing_only": {**BOOL, "description": "Skip tile values (same "
                                       "cycles, faster); default true."},
                       "max_cycles": {**INT, "minimum": 1}}),
        "output": _obj({"program": STR, "hw": STR, "mode": STR,
                        "measurement": _obj({"status": STR, "cycles": INT,
                                             "hbm_model": STR}, ("status", "cycles")),
                        "dims": ANY_OBJECT, "busiest": LIST, "outputs": ANY_OBJECT,
                        "warnings": LIST},
                       ("program", "hw", "mode", "measurement")),
    },
    "format": {
        "description": "The program in stepc's canonical layout (comments kept; "
        "idempotent). Writes nothing.",
        "input": _args({**PROGRAM, **TIME_LIMIT}),
        "output": _obj({"program": STR, "changed": BOOL, "formatted": STR},
                       ("program", "changed", "formatted")),
    },
    "explain": {
        "description": "A diagnostic code's documentation: meaning, a mistake that "
        "triggers it, the message and the fix.",
        "input": _args({"code": {**STR, "description": "e.g. E0343"}}, ("code",)),
        "output": _obj({"code": STR, "meaning": STR, "severity": STR, "doc": STR,
                        "missing": {**STR, "description": "Why `doc` is empty (this "
                                    "copy of stepc lacks its documentation)."}},
                       ("code", "meaning", "severity", "doc")),
    },
    "operator": {
        "description": "An operator's reference: signature, shape rule, parameters (kind, "
        "default, meaning), outputs and an example program; or a function's (the `fn=` of "
        "Map, Accum, Scan, FlatMap); without `name`, the list of both with signatures.",
        "input": _args({"name": {**STR, "description": "e.g. Reshape, or matmul"}}),
        "output": _obj({"name": STR, "family": STR, "signature": STR, "doc": STR,
                        "params": LIST, "outputs": LIST, "example": STR, "operators": LIST}),
    },
    "tune": {
        "description": "The best schedule of workspace programs under budgets without "
        "simulating the whole space (analysis, roofline, fluid screen, then the chosen "
        "model confirms). Small spaces only (64 points).",
        "input": _args({"paths": {"type": "array", "items": STR, "minItems": 1},
                       "space": {"type": "object",
                                 "additionalProperties": {"type": "array", "items": INT},
                                 "description": "Param -> values, e.g. {\"TB\": [16, 32]}."},
                       "budgets": {"type": "object", "description": "Metric -> limit, "
                                   "e.g. {\"on_chip_bytes\": \"64MiB\"}."},
                       "objectives": {"type": "array", "items": STR, "maxItems": 2,
                                      "description": "Metrics to minimise (max:METRIC "
                                      "maximises); two give a Pareto front."},
                       "model": {"enum": confirming_models()}, **HW, **TIME_LIMIT,
                       "traces": {"type": "object", "description": "External stream -> "
                                  "a trace file or a list of them (workspace)."}},
                      ("paths", "space")),
        "output": _obj({"winner": {"type": ["object", "null"]}, "runners_up": LIST,
                        "pareto": LIST}, ("winner",)),
    },
    "estimate": {
        "description": "Cycles at rising fidelity: the roofline lower bound (analysis "
        f"only), then the {', '.join(LADDER[1:-1])} and {LADDER[-1]} memory models "
        "(simulations). Each answer "
        "names its model and that model's measured error against the reference simulator "
        "and the HDL on the paper's SwiGLU sweep (docs/dram.md), and its energy in joules "
        "(the roofline's: a lower bound; docs/energy.md).",
        "input": _args({**PROGRAM, **HW, **TRACES, **TIME_LIMIT,
                       "fidelity": {"type": "array",
                                    "items": {"enum": list(LADDER)},
                                    "description": "Models to run; default roofline and "
                                    "fluid."}}),
        "output": _obj({"program": STR, "hw": STR, "error_source": STR, "estimates": {
            "type": "array", "items": _obj({"model": STR, "kind": STR,
                                            "cycles": NUM_OR_NULL, "energy_j": NUM_OR_NULL,
                                            "error": LIST, "note": STR},
                                           ("model", "kind", "cycles", "error"))}},
                       ("program", "estimates")),
    },
    "task_list": {
        "description": "The agent task suite (stepc tasks list): each kernel-writing task's "
        "name, family, the hardware preset it is scored on, and title.",
        "input": _args({}),
        "output": _obj({"schema": STR, "tasks": {"type": "array", "items": _obj(
            {"name": STR, "family": STR, "preset": STR, "title": STR}, ("name",))}},
                       ("tasks",)),
    },
    "task_show": {
        "description": "A task (stepc tasks show): its statement, the interface a solution "
        "must declare (tensors and external streams), how it is scored, and the reference "
        "solution.",
        "input": _args({"name": {**STR, "description": "e.g. softmax"},
                        "solution": {**BOOL, "description": "Include the reference "
                                     "solution (default true)."}}, ("name",)),
        "output": _obj({"name": STR, "title": STR, "family": STR, "preset": STR,
                        "time_limit": NUM, "tensors": LIST, "externals": LIST,
                        "statement": STR, "interface": STR, "scoring": STR, "solution": STR},
                       ("name", "statement", "interface")),
    },
    "task_check": {
        "description": "Check and score a solution of a task (stepc tasks check): compile "
        "it, refuse it if it breaks the task's rules, run it on fresh inputs drawn from "
        "`seed`, compare its outputs with the task's reference and report its cycles and "
        "reward (reference cycles / its cycles; 0 when it fails). A failing solution is a "
        "result with status `fail`, stage and reason, not a tool error.",
        "input": _args({"task": {**STR, "description": "The task's name, e.g. softmax."},
                        "program": {**STR, "description": "The solution's .step text (or "
                                    "give `path`); checked on its own, as `name`."},
                        "path": {**STR, "description": "A .step solution under the "
                                 "workspace root (or give `program`)."},
                        "name": {**STR, "description": "With `program`: the file name its "
                                 "diagnostics carry (default solution.step)."},
                        "seed": {**INT, "minimum": 0, "description": "Seed of the inputs "
                                 "(default: a fresh one, given in the result)."},
                        **TIME_LIMIT}, ("task",)),
        "output": _obj({"task": STR, "status": STR, "stage": STR,
                        "reason": STR, "seed": INT, "reward": NUM,
                        "candidate": {"type": ["object", "null"]},
                        "reference": {"type": ["object", "null"]}},
                       ("task", "status", "reward")),
    },
}
