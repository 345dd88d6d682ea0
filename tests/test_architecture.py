"""The house as a drawing of its imports: no circle among stepc's modules, no arrow from a
lower floor up to a higher one, and the CLI entering the toolchain only through the API.

Imports are read from the source with `ast`, never run: module-level imports and the lazy
ones inside functions both count (a lazy import still runs when its function does). Imports
under `if TYPE_CHECKING:` are annotations only: they do not count as arrows between floors,
but a circle through them is still a circle a reader has to untangle, so the circle check
reads them too."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stepc"

# Floors, lowest first: a module may import its own floor and those below, never above.
# A module's floor is that of its longest matching prefix.
FLOORS = [
    # leaves: the package root (its version; its public names load lazily by name, see
    # below), source text, small shared utilities, hardware configs, trace files
    ("stepc", "stepc.codes", "stepc.source", "stepc.sympy_lazy", "stepc.canon", "stepc.schemas",
     "stepc.tables", "stepc.outputs", "stepc.traces", "stepc.weights", "stepc.hw",
     "stepc.spelling"),
    ("stepc.diagnostics", "stepc.types"),
    ("stepc.ops",),
    ("stepc.grammar",),
    ("stepc.graph",),
    ("stepc.typecheck",),
    # the reference toolchain's graphs, read below the front end, which compiles a .pb
    # through them (the compile function is passed in); written from a checked program
    # with its external streams' data (export, up with the sweeps)
    ("stepc.interop",),
    ("stepc.frontend",),
    ("stepc.analyze", "stepc.fifo.static"),
    ("stepc.sim", "stepc.viz"),
    ("stepc.measure",),
    ("stepc.explore", "stepc.fifo", "stepc.tune", "stepc.reproduction", "stepc.torch",
     "stepc.tasks", "stepc.rewrite", "stepc.interop.write"),
    # every text report, drawn from the results of the floors below
    ("stepc.report",),
    ("stepc.api",),
    # the use cases the front ends enter through
    ("stepc.app",),
    ("stepc.cli", "stepc.lsp", "stepc.docgen", "stepc.mcp"),
    ("stepc.__main__",),
]

# What the CLI may import besides itself: the API and small leaf utilities (the memory
# models' table gives its choices). The commands of from-torch, import and export enter
# through their own packages' front doors.
CLI_MAY_IMPORT = ("stepc", "stepc.api", "stepc.app", "stepc.report", "stepc.codes", "stepc.diagnostics", "stepc.outputs",
                  "stepc.spelling", "stepc.hw.memory",
                  "stepc.source", "stepc.tables", "stepc.lsp", "stepc.torch", "stepc.interop",
                  "stepc.mcp")

# Known circles and upward arrows being removed in their own changes; each entry is
# (importer, imported). Remove an entry when its import is gone (the test says so).
ALLOWED: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def owner(name: str) -> str | None:
    """The module an imported name lives in (`stepc.api.Cost` -> `stepc.api`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str, annotations: bool = False) -> dict[str, int]:
    """The stepc modules `module` imports -> the line of the first such import (with
    `annotations`, also those under `if TYPE_CHECKING:`)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_checking(child) and not annotations:
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in child.names]
            for name in names:
                target = owner(name) if name.startswith("stepc") else None
                if target is not None and target != module:
                    found.setdefault(target, child.lineno)
            visit(child)
    visit(ast.parse(path.read_text(), str(path)))
    return found


@functools.cache
def import_graph(annotations: bool = False) -> dict:
    """Each module's imports (read once per process, when a test asks)."""
    return {m: imports(m, annotations) for m in MODULES}


def floor(module: str) -> int | None:
    best, level = -1, None
    for i, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    return level


def where(module: str, target: str) -> str:
    path = MODULES[module].relative_to(PACKAGE.parent)
    return f"{path}:{import_graph()[module][target]}: {module} -> {target}"


@pytest.mark.xdist_group("architecture")
def test_every_module_has_a_floor():
    assert [m for m in MODULES if floor(m) is None] == []


@pytest.mark.xdist_group("architecture")
def test_no_arrow_runs_up_a_floor():
    upward = [where(m, t) for m, targets in import_graph().items() for t in targets
              if floor(t) > floor(m) and (m, t) not in ALLOWED]
    assert upward == []


@pytest.mark.xdist_group("architecture")
@pytest.mark.parametrize("annotations", [False, True], ids=["run-time", "with-annotations"])
def test_no_import_cycles(annotations):
    """Tarjan's strongly connected components of the import graph: none larger than one
    module, except the allowed pairs' circles."""
    edges = {m: [t for t in targets if (m, t) not in ALLOWED]
             for m, targets in import_graph(annotations).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(v: str) -> None:  # iterative-enough: the graph is ~150 modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for m in edges:
        if m not in index:
            connect(m)
    assert circles == []


@pytest.mark.xdist_group("architecture")
def test_the_cli_enters_through_the_api():
    outside = [where(m, t) for m, targets in import_graph().items() if m.startswith("stepc.cli")
               for t in targets if not t.startswith("stepc.cli")
               and not any(t == ok or t.startswith(ok + ".") and ok != "stepc"
                           for ok in CLI_MAY_IMPORT)]
    assert outside == []


@pytest.mark.parametrize("entry", sorted(ALLOWED))
@pytest.mark.xdist_group("architecture")
def test_allowed_entries_are_still_needed(entry):
    module, target = entry
    assert target in import_graph().get(module, {}), \
        f"{module} no longer imports {target}: remove the entry from ALLOWED"


@pytest.mark.xdist_group("architecture")
def test_the_package_root_names_only_api_modules():
    """`stepc.<name>` loads its module by name on first use (the one import by string, the
    API's public face): every such module is on the API's floor or below."""
    import stepc
    for name, module in stepc._LAZY.items():
        assert floor(module) <= floor("stepc.api"), (name, module)


@pytest.mark.xdist_group("architecture")
def test_the_mcp_server_enters_through_the_api():
    """stepc.mcp is a front end like the CLI: the API and the leaf utilities only (the
    memory models' table gives its schemas' choices)."""
    may = ("stepc", "stepc.api", "stepc.codes", "stepc.diagnostics", "stepc.source",
           "stepc.hw.memory")
    outside = [where(m, t) for m, targets in import_graph().items() if m.startswith("stepc.mcp")
               for t in targets if not t.startswith("stepc.mcp")
               and not any(t == ok or t.startswith(ok + ".") and ok != "stepc" for ok in may)]
    assert outside == []
