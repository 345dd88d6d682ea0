"""The API's exceptions: every one is a `StepError` carrying diagnostics or a message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.diagnostics import Diagnostic, StepError

if TYPE_CHECKING:
    from stepc.source import Span


class InputError(StepError):
    """A setting the caller gave does not fit (unknown param or symbol, a bad trace or
    hardware configuration): the CLI's usage errors (exit 2)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None,
                 sources: dict | None = None):
        super().__init__(diagnostics or [], sources, message)


class SimulationError(StepError):
    """The simulated program failed at run time (a bad address, a run too large to hold);
    `node` and `span` say where, when known."""

    def __init__(self, message: str, node: str | None = None, span: Span | None = None,
                 code: str | None = None):
        super().__init__([], None, message)
        self.node, self.span, self.code = node, span, code

    def located(self) -> str:
        """The message as the CLI prints it: `file:line:col: error[CODE]: ... (in `node`)`."""
        where = f"{self.span}: " if self.span is not None else "stepc: "
        error = f"error[{self.code}]" if self.code else "error"
        inner = Exception.__str__(self)
        return f"{where}{error}: {inner} (in `{self.node}`)" if self.node else \
            f"{where}{error}: {inner}"

    def __str__(self) -> str:
        return self.located()

    @classmethod
    def of(cls, e, nodes: dict) -> SimulationError:
        """The simulator's error `e`, located at its operator among `nodes` when it names
        one."""
        node = nodes.get(e.node) if e.node else None
        return cls(str(e), e.node, node.span if node is not None else e.span, e.code)


class Deadlock(StepError):
    """The simulation deadlocked. `report` is the wait-for report (blocked operators, their
    FIFOs, source lines and the wait-for cycle), `blocked` its entries, and `run` what the
    run measured up to the deadlock."""

    def __init__(self, run, report: str):  # run: the api.results.Run
        super().__init__([], None, report.rstrip("\n"))
        self.run, self.report = run, report
        self.blocked = list(run.deadlock or [])
