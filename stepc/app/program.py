"""The use cases of one program: `check` it, `analyze` its cost, draw it (`dot`).

Each checks the program first: an override that names no `param`, or hardware that does
not load, raises InputError; a program with errors comes back as a result holding its
check report (`checked`), for the front end to report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepc.app.inputs import checked_program, load_hardware

if TYPE_CHECKING:
    from rich.console import Console

    from stepc.api import CheckReport, Cost, Program

@dataclass
class Checked:
    """`stepc check FILE`: what checking found, errors or not."""

    checked: CheckReport
    show_types: bool = False  # the text report lists every stream's type
    show_all: bool = False  # ... every loop iteration's

    @property
    def unreadable(self) -> bool:
        return self.checked.unreadable

    def to_dict(self) -> dict:
        return self.checked.to_dict()

    @property
    def lists_types(self) -> bool:
        """The text report has a types listing (with `show_types`, when the program
        type-checked); without one it is empty."""
        return self.show_types and self.checked.compiled.typed is not None

    def render(self, console: Console) -> None:
        """The types listing, if `lists_types`."""
        if self.lists_types:
            console.print(self.checked.types_text(self.show_all), markup=False,
                          soft_wrap=True, end="")


def check(path: str, defines: Mapping[str, int], show_types: bool = False,
          show_all: bool = False, printed_only: bool = False) -> Checked:
    """`stepc check`: parse, elaborate and type-check a program file. `printed_only`: the
    result is only reported (never analyzed or simulated), so its static dims may stay
    Python integers and a program without symbolic dims is checked without loading sympy."""
    if not printed_only:
        return Checked(checked_program(path, defines), show_types, show_all)
    from stepc.sympy_lazy import static_dims_as_ints
    with static_dims_as_ints():
        return Checked(checked_program(path, defines), show_types, show_all)


@dataclass
class Analyzed:
    """`stepc analyze FILE`: the cost, or the check report of a program with errors."""

    checked: CheckReport
    cost: Cost | None = None
    fifos: dict[str, Any] | None = None  # with `fifo_bytes`
    warnings: list[str] = field(default_factory=list)  # settings the analysis does not read
    show_all: bool = False  # the text report lists every operator instance
    energy: bool = False  # the text report adds the energy bound and the area

    def to_dict(self) -> dict:
        assert self.cost is not None  # a program with errors gives its check report
        return {**self.cost.to_dict(self.energy), **(self.fifos or {})}

    def render(self, console: Console) -> None:
        from stepc.report.fifo import fifo_line
        assert self.cost is not None  # a program with errors gives its check report
        self.cost.render(console, self.show_all)
        if self.fifos:
            console.print(fifo_line(self.fifos), markup=False, soft_wrap=True)
        if self.energy:
            for text in self.cost.energy_lines():
                console.print(text, markup=False, soft_wrap=True)


def analyze(path: str, defines: Mapping[str, int], hw: str | None = None,
            sets: Sequence[str] = (), binds: Mapping[str, int] | None = None,
            traces: Mapping[str, str] | None = None, onchip_model: str = "artifact",
            fifo_bytes: bool = False, show_all: bool = False,
            energy: bool = False) -> Analyzed:
    """`stepc analyze`: off-chip traffic, on-chip memory, FLOPs and intensity of a program
    file, bound by `binds` and `traces`; with `hw` or `sets`, the roofline too; with
    `energy`, the energy bound and the area (on the default hardware without `hw`)."""
    report = checked_program(path, defines)
    config, warnings = load_hardware(hw, sets, roofline=not (fifo_bytes or energy)) \
        if (hw or sets or energy) else (None, [])
    if not report.ok:
        return Analyzed(report, warnings=warnings)
    cost = report.program().analyze(hw=config, bind=binds, traces=traces,
                                    onchip_model=onchip_model)
    fifos = None
    if fifo_bytes:
        from stepc.app.fifo import fifo_totals
        fifos = fifo_totals(report.compiled, config, cost.bindings, cost.totals["on_chip_bytes"])
    return Analyzed(report, cost, fifos, warnings, show_all, energy)


def analyze_checked(report: CheckReport, hw: str | None = None,
                    binds: Mapping[str, int] | None = None,
                    traces: Mapping[str, str] | None = None,
                    onchip_model: str = "artifact") -> Analyzed:
    """`analyze` of a program already checked (a front end's cached report): its errors
    raise StepError, a bad setting InputError."""
    cost = report.program().analyze(hw=hw, bind=binds, traces=traces,
                                    onchip_model=onchip_model)
    return Analyzed(report, cost, warnings=cost.warnings)


@dataclass
class Drawing:
    """`stepc dot FILE`: the program's graph as DOT text."""

    checked: CheckReport
    text: str = ""
    operators: int = 0
    collapsed: bool = False

    @property
    def illegible(self) -> bool:
        """Drawn whole, too many operators for its text to be read."""
        from stepc.viz.dot import LARGE_GRAPH
        return not self.collapsed and self.operators > LARGE_GRAPH

    def to_dict(self) -> dict:
        return {"program": self.checked.name, "dot": self.text}

    def render(self, console: Console) -> None:
        console.print(self.text, markup=False, soft_wrap=True, end="")


def draw(path: str, defines: Mapping[str, int], collapse: bool = False,
         annotate: str | None = None, binds: Mapping[str, int] | None = None,
         traces: Mapping[str, str] | None = None, onchip_model: str = "artifact") -> Drawing:
    """`stepc dot`: DOT text of a program file, shaded by `annotate`: "analysis" (its
    traffic shares, bound by `binds` and `traces`) or a JSON file of node shades."""
    report = checked_program(path, defines)
    if not report.ok:
        return Drawing(report)
    prog: Program = report.program()
    if annotate == "analysis":
        text = prog.dot(collapse, prog.analyze(bind=binds, traces=traces,
                                               onchip_model=onchip_model))
    elif annotate is not None:
        text = prog.dot(collapse, heat_file(annotate), f"{prog.name}: shaded by {annotate}")
    else:
        text = prog.dot(collapse)
    return Drawing(report, text, prog.operators, collapse)


def heat_file(path: str) -> dict:
    """Node shades from a JSON file {"heat": {node: {"fraction": f, "note": s}}}."""
    import json

    from stepc.api import InputError
    from stepc.app.files import heat
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return {k: heat(float(v["fraction"]), str(v.get("note", "")))
                for k, v in doc["heat"].items()}
    except FileNotFoundError:
        raise InputError(f"--annotate {path}: expected `analysis` or a JSON file "
                         "that exists") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"--annotate {path}: expected JSON "
                         f"{{\"heat\": {{node: {{\"fraction\": ...}}}}}} ({e})") from None
