"""The `stepc` command line: thin compositions of the pipeline stages.

Exit codes: 0 success (warnings allowed), 1 the program has errors, 2 usage error,
3 the simulation deadlocked, 70 internal error (a bug in stepc: please report it).
"""

from __future__ import annotations

import difflib
import json
import math
import sys
import traceback

import click

from stepc import __version__
from stepc.diagnostics import Diagnostic, diagnostic_json, render_text, span_json
from stepc.frontend import Compiled, compile_file
from stepc.types import DTYPE_BYTES, fmt_dim

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70


def parse_defines(values: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        name, sep, val = v.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise click.UsageError(f"-D expects NAME=VALUE, found {v!r}")
        try:
            out[name] = int(val.strip(), 0)
        except ValueError:
            raise click.UsageError(f"-D {name}: expected an integer, found {val!r}") from None
    return out


def check_overrides(result: Compiled) -> None:
    """Unknown -D names are usage errors (once the program parsed)."""
    if result.typed is None or not result.unknown_overrides:
        return
    params = list(result.typed.program.params)
    msgs = []
    for name in result.unknown_overrides:
        near = difflib.get_close_matches(name, params, n=1)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        msgs.append(f"-D {name}: the program has no parameter `{name}`{hint}")
    raise click.UsageError("; ".join(msgs))


def emit_diagnostics(result: Compiled, sort: bool = True) -> None:
    diags = result.diagnostics.sorted() if sort else result.diagnostics.items
    text = render_text(diags, result.sources)
    if text:
        click.echo(text, err=True, nl=False)


def _exit_code(result: Compiled, werror: bool) -> int:
    if result.diagnostics.errors or result.typed is None:
        return EXIT_PROGRAM
    if werror and result.diagnostics.warnings:
        return EXIT_PROGRAM
    return EXIT_OK


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit codes: 0 ok, 1 program errors, 2 usage errors, 3 simulation "
             "deadlock, 70 internal error.")
@click.version_option(__version__, prog_name="stepc")
@click.option("--debug", is_flag=True, hidden=True, help="Show Python tracebacks of "
              "internal errors.")
def main(debug: bool) -> None:
    """stepc: check, analyze, simulate and draw Streaming Tensor Programs (.step files)."""


_DEFINE = click.option("-D", "defines", multiple=True, metavar="NAME=VALUE",
                       help="Override a `param` of the program (repeatable).")


@main.command("check")
@click.argument("file", type=str)
@_DEFINE
@click.option("--types", "show_types", is_flag=True,
              help="Print every stream's inferred type and symbolic shape, in source order.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.option("--werror", is_flag=True, help="Treat warnings as errors (exit 1).")
def check_cmd(file: str, defines: tuple[str, ...], show_types: bool, fmt: str,
              werror: bool) -> None:
    """Type- and shape-check a .step program (FILE, or - for standard input)."""
    result = compile_file(file, parse_defines(defines))
    check_overrides(result)
    if fmt == "json":
        click.echo(json.dumps(check_json(result), indent=2, sort_keys=True))
    else:
        if show_types and result.typed is not None:
            click.echo(types_text(result), nl=False)
        emit_diagnostics(result)
    sys.exit(_exit_code(result, werror))


def _pairs(values: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, sep, val = v.partition("=")
        if not sep or not name.strip() or not val.strip():
            raise click.UsageError(f"{flag} expects NAME=VALUE, found {v!r}")
        out.append((name.strip(), val.strip()))
    return out


def _load_hw(hw: str | None, sets: tuple[str, ...], roofline: bool = False):
    """The hardware configuration; warns about each `--set` the run will not read."""
    from stepc.hw.config import ConfigError, load_config, roofline_unused, set_warnings
    try:
        config = load_config(hw, sets)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    for warning in set_warnings(config, sets, roofline_unused(config) if roofline else None):
        click.echo(f"warning: {warning}", err=True)
    return config


@main.command("analyze")
@click.argument("file", type=str)
@_DEFINE
@click.option("--bind", "binds", multiple=True, metavar="SYMBOL=VALUE",
              help="Give a symbolic dim a value (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Bind the external stream NAME to a trace file (.npy, .npz, .csv).")
@click.option("--hw", default=None, metavar="PRESET|PATH",
              help="Hardware for the roofline bound (presets: paper-eval, hdl-validation).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting (repeatable).")
@click.option("--onchip-model", type=click.Choice(["artifact", "paper"]), default="artifact",
              show_default=True, help="On-chip accounting: the evaluation's (artifact) or the "
              "paper's Section 4.2 equations (paper).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--all", "show_all", is_flag=True, help="Also list operators with no cost.")
def analyze_cmd(file: str, defines, binds, traces, hw, sets, onchip_model, fmt,
                show_all) -> None:
    """Off-chip traffic, on-chip memory, FLOPs and operational intensity of a program."""
    from rich.console import Console

    from stepc.analyze import roofline
    from stepc.analyze.report import render_text, to_json

    result = compile_file(file, parse_defines(defines))
    check_overrides(result)
    config = _load_hw(hw, sets, roofline=True) if (hw or sets) else None
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_PROGRAM)
    a = _bound_analysis(result, binds, traces, onchip_model, config)
    roof = roofline(a, config) if config is not None else None
    if fmt == "json":
        click.echo(json.dumps(to_json(a, config, roof), indent=2, sort_keys=True))
    else:
        console = Console(file=sys.stdout, width=110,
                          highlight=False, soft_wrap=False)
        render_text(a, console, show_all, config, roof)
        emit_diagnostics(result)
    sys.exit(EXIT_OK)


@main.command("dot")
@click.argument("file", type=str)
@_DEFINE
@click.option("-o", "--output", "out", default=None, metavar="OUT",
              help="Write to OUT (.dot/.gv text, or .svg/.png/.pdf via Graphviz); default: "
              "DOT text on standard output.")
@click.option("--collapse", is_flag=True,
              help="Fold identical loop iterations into one cluster labeled with the count.")
@click.option("--annotate", default=None, metavar="analysis|FILE.json",
              help="Shade nodes: `analysis` by share of off-chip traffic (labels on-chip "
              "bytes), or a JSON file {\"heat\": {node: {\"fraction\": f, \"note\": s}}}.")
@click.option("--bind", "binds", multiple=True, metavar="SYMBOL=VALUE",
              help="Bind a symbol for --annotate analysis.")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Bind an external stream to a trace for --annotate analysis.")
@click.option("--onchip-model", type=click.Choice(["artifact", "paper"]), default="artifact",
              show_default=True, help="On-chip accounting for --annotate analysis.")
@click.option("--force", is_flag=True, help="Overwrite OUT even if stepc did not write it.")
def dot_cmd(file, defines, out, collapse, annotate, binds, traces, onchip_model, force):
    """Draw a program's graph as DOT (or SVG/PNG/PDF with Graphviz installed)."""
    from stepc.viz.dot import to_dot
    from stepc.viz.render import RenderError, write_output

    result = compile_file(file, parse_defines(defines))
    check_overrides(result)
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_PROGRAM)
    heat, title = None, None
    if annotate is not None:
        heat, title = _heat(result, annotate, binds, traces, onchip_model)
    text = to_dot(result.typed, collapse=collapse, heat=heat, title=title)
    if out is None or out == "-":
        click.echo(text, nl=False)
    else:
        try:
            write_output(text, out, force)
        except RenderError as e:
            click.echo(f"stepc: error: {e}", err=True)
            sys.exit(EXIT_PROGRAM)
    emit_diagnostics(result)
    sys.exit(EXIT_OK)


def _heat(result: Compiled, annotate: str, binds, traces, onchip_model):
    """Node shading for `stepc dot --annotate`."""
    from stepc.viz.dot import Heat, analysis_heat

    if annotate == "analysis":
        a = _bound_analysis(result, binds, traces, onchip_model)
        heat, unbound = analysis_heat(a)
        title = f"{result.name}: shaded by share of off-chip traffic"
        if unbound:
            names = ", ".join(unbound[:4]) + (f", ... ({len(unbound)} dims)"
                                              if len(unbound) > 4 else "")
            title += f" (unbound {names} taken as 1; bind with --bind/--trace)"
        return heat, title
    try:
        with open(annotate, encoding="utf-8") as f:
            doc = json.load(f)
        heat = {k: Heat(float(v["fraction"]), str(v.get("note", "")))
                for k, v in doc["heat"].items()}
    except FileNotFoundError:
        raise click.UsageError(f"--annotate {annotate}: expected `analysis` or a JSON file "
                               "that exists") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise click.UsageError(f"--annotate {annotate}: expected JSON "
                               f"{{\"heat\": {{node: {{\"fraction\": ...}}}}}} ({e})") from None
    return heat, f"{result.name}: shaded by {annotate}"


def _bound_analysis(result: Compiled, binds, traces, onchip_model, config=None):
    """analyze() with --bind and --trace values applied (usage errors for bad ones)."""
    import sympy

    from stepc.analyze import analyze, trace_bindings
    from stepc.traces import TraceError, load_array

    a = analyze(result.typed, onchip_model, config)
    values: dict = {}
    try:
        arrays = {name: load_array(path) for name, path in _pairs(traces, "--trace")}
        values.update(trace_bindings(result.typed, arrays))
    except TraceError as e:
        raise click.UsageError(str(e)) from None
    known = set(result.typed.symbols.infos)
    for name, val in _pairs(binds, "--bind"):
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise click.UsageError(f"--bind {name}: the program has no symbol `{name}`{hint}")
        try:
            values[name] = sympy.Integer(int(val, 0))
        except ValueError:
            raise click.UsageError(f"--bind {name}: expected an integer, found {val!r}") \
                from None
    return a.bind(values) if values else a


EXIT_DEADLOCK = 3
FUNCTIONAL_LIMIT = 256 * 2**20  # bytes of tensors above which values are skipped by default


@main.command("sim")
@click.argument("file", type=str)
@_DEFINE
@click.option("--hw", default=None, metavar="PRESET|PATH",
              help="Hardware (presets: paper-eval (default), hdl-validation; or a TOML file).")
@click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override one hardware setting, e.g. hbm.model=fluid (repeatable).")
@click.option("--trace", "traces", multiple=True, metavar="NAME=PATH",
              help="Drive the external stream NAME from a trace file (.npy, .npz, .csv).")
@click.option("--timing-only", is_flag=True,
              help="Carry shapes, selectors and addresses but no tile values (faster; same "
              "cycles). The default for programs whose tensors exceed 256 MiB.")
@click.option("--functional", is_flag=True,
              help="Compute tile values even for programs with large tensors.")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Write output tensors as DIR/<tensor>.npy (functional mode).")
@click.option("--trace-out", default=None, metavar="FILE.json",
              help="Write a Chrome/Perfetto trace (one track per operator).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--print-config", is_flag=True, help="Print the effective hardware config "
              "as TOML and exit.")
@click.option("--max-cycles", type=click.IntRange(min=1), default=None, metavar="N",
              help="Stop with an error if the run passes cycle N.")
def sim_cmd(file, defines, hw, sets, traces, timing_only, functional, out_dir, trace_out,
            fmt, print_config, max_cycles):
    """Simulate a program cycle by cycle on a spatial dataflow accelerator model."""
    import os

    from rich.console import Console

    from stepc.analyze import analyze
    from stepc.sim.kernel import SimError
    from stepc.sim.report import deadlock_text, perfetto_trace, render_text, to_json, \
        write_json
    from stepc.sim.run import simulate
    from stepc.traces import TraceError, load_array

    config = _load_hw(hw, sets)
    if print_config:
        click.echo(config.to_toml(), nl=False)
        sys.exit(EXIT_OK)
    result = compile_file(file, parse_defines(defines))
    check_overrides(result)
    if not result.ok:
        emit_diagnostics(result)
        sys.exit(EXIT_PROGRAM)
    if out_dir and os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise click.UsageError(f"--out {out_dir}: not a directory")
    if timing_only and functional:
        raise click.UsageError("--timing-only and --functional exclude each other")
    tensor_bytes = sum(math.prod(t.shape) * DTYPE_BYTES[t.dtype]
                       for t in result.typed.program.tensors.values())
    if not timing_only and not functional and tensor_bytes > FUNCTIONAL_LIMIT:
        timing_only = True
        click.echo(f"note: timing-only run: the tensors hold {tensor_bytes / 2**20:,.0f} MiB "
                   "(--functional computes values anyway)", err=True)
    try:
        arrays = {name: load_array(path) for name, path in _pairs(traces, "--trace")}
        with _progress() as progress:
            run = simulate(result.typed, config, arrays, functional=not timing_only,
                           trace_ops=trace_out is not None, max_cycles=max_cycles,
                           progress=progress)
    except TraceError as e:
        raise click.UsageError(str(e)) from None
    except SimError as e:
        node = result.typed.program.nodes.get(e.node) if e.node else None
        where = f"{node.span}: " if node is not None else "stepc: "
        click.echo(f"{where}error: {e} (in `{e.node}`)" if e.node else f"{where}error: {e}",
                   err=True)
        sys.exit(EXIT_PROGRAM)
    a = analyze(result.typed, "artifact", config).bind(dict(run.bindings))
    totals = {**a.totals, "allocated_compute": a.allocated_compute}
    if trace_out:
        write_json(trace_out, perfetto_trace(run))
    if out_dir and run.outputs and not run.deadlock:
        os.makedirs(out_dir, exist_ok=True)
        import numpy as np

        from stepc.sim.report import write_atomic
        for name, arr in sorted(run.outputs.items()):
            write_atomic(os.path.join(out_dir, f"{name}.npy"),
                         lambda f, a=arr: np.save(f, a))
    if fmt == "json":
        doc = to_json(run, totals)
        doc["deadlock"] = None if not run.deadlock else [b.__dict__ for b in run.deadlock]
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        console = Console(file=sys.stdout, width=110, soft_wrap=False)
        render_text(run, console, totals)
    emit_diagnostics(result)
    if run.deadlock:
        click.echo(deadlock_text(run, result.typed.program.nodes), err=True, nl=False)
        sys.exit(EXIT_DEADLOCK)
    sys.exit(EXIT_OK)


class _progress:
    """A spinner with the simulated cycle on stderr, only on a terminal."""

    def __enter__(self):
        self.live = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self.live = Progress(SpinnerColumn(), TextColumn("simulating: cycle {task.fields[c]:,}"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
            self.live.__enter__()
            self.task = self.live.add_task("sim", total=None, c=0)
            return lambda t: self.live.update(self.task, c=t)
        return None

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)
        return False


def types_text(result: Compiled) -> str:
    """Every stream with its inferred type, then every symbol and where it came from."""
    typed = result.typed
    rows = [(f"{span.file}:{span.line}:{span.col}", label, str(t))
            for _node, _port, label, span, t in typed.streams_in_order()]
    lines = []
    w0 = max((len(r[0]) for r in rows), default=0)
    w1 = max((len(r[1]) for r in rows), default=0)
    for loc, label, t in rows:
        lines.append(f"{loc:<{w0}}  {label:<{w1}} : {t}")
    if typed.symbols.infos:
        lines.append("")
        lines.append("symbols:")
        kinds = {"dynamic": "dynamic-regular", "ragged": "ragged", "param": "param"}
        resolved = {s.name: v for s, v in typed.subst.items()}
        for info in typed.symbols.infos.values():
            where = f" ({info.span})" if info.span else ""
            origin = f"introduced by `{info.origin}`{where}" if info.origin else \
                f"declared{where}"
            value = f" = {fmt_dim(resolved[info.name])} (assumed)" \
                if info.name in resolved else ""
            lines.append(f"  {info.name}{value}: {kinds[info.kind]}, {origin}: {info.reason}")
    if typed.facts:
        lines.append("")
        lines.append("facts:")
        ops = {"Equality": "==", "Unequality": "!=", "LessThan": "<=", "GreaterThan": ">=",
               "StrictLessThan": "<", "StrictGreaterThan": ">"}
        lines.extend(f"  {fmt_dim(f.lhs)} {ops.get(type(f).__name__, '?')} {fmt_dim(f.rhs)}"
                     for f in typed.facts)
    return "\n".join(lines) + "\n"


def check_json(result: Compiled) -> dict:
    diags: list[Diagnostic] = result.diagnostics.sorted()
    out: dict = {
        "version": 1,
        "program": result.name,
        "diagnostics": [diagnostic_json(d) for d in diags],
        "summary": {"errors": sum(d.severity.value == "error" for d in diags),
                    "warnings": sum(d.severity.value == "warning" for d in diags)},
        "streams": [],
        "symbols": [],
    }
    typed = result.typed
    if typed is None:
        return out
    for node, port, label, span, t in typed.streams_in_order():
        out["streams"].append({
            "name": label, "node": node.name, "op": node.op, "port": node.outputs[port],
            "type": str(t), "elem": str(t.elem), "rank": t.rank,
            "shape": [str(d) for d in t.shape], "location": span_json(span),
        })
    for info in typed.symbols.infos.values():
        out["symbols"].append({"name": info.name, "kind": info.kind, "origin": info.origin,
                               "reason": info.reason, "location": span_json(info.span)})
    return out


def run() -> None:
    """Entry point wrapper: never show a Python traceback for a stepc bug without context."""
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception:  # pragma: no cover - defensive
        click.echo("stepc: internal error (this is a bug in stepc; please report it with the "
                   "input that triggered it)", err=True)
        if "--debug" in sys.argv:
            traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


# The sweep, plot and reproduce commands live in stepc.cli_sweep, which uses the helpers above.
from stepc.cli_sweep import plot_cmd, reproduce_cmd, sweep_cmd  # noqa: E402

for _command in (sweep_cmd, plot_cmd, reproduce_cmd):
    main.add_command(_command)
