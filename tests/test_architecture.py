"""The house as a drawing of its imports: no circle among stepc's modules, no arrow from a
lower floor up to a higher one (annotations and modules named by string included), the front
ends entering the toolchain only through the use cases, and only the API's public names
imported from outside it.

Imports are read from the source with `ast`, never run: module-level imports and the lazy
ones inside functions both count (a lazy import still runs when its function does). Imports
under `if TYPE_CHECKING:` are annotations only: they do not count as arrows between floors,
but a circle through them is still a circle a reader has to untangle, so the circle check
reads them too."""

from __future__ import annotations

import ast
import functools
import re
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
     "stepc.registry",
     "stepc.spelling"),
    ("stepc.diagnostics", "stepc.types", "stepc.symbol_families"),
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
    ("stepc.sim", "stepc.viz", "stepc.energy"),
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

# Known circles and upward arrows being removed in their own changes; each entry is
# (importer, imported). Remove an entry when its import is gone (the test says so).
ALLOWED: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# the Python modules and the Cython sources of compiled ones (stepc/**/*.pyx)
MODULES = {module_name(p): p for p in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")])}
PYTHON_IMPORT = re.compile(r"(from \S+ import |import )(?!.*\bcimport\b)")


def source(module: str) -> str:
    """A module's text as Python: of a Cython source, its Python imports alone (in place,
    each on its own line: what the import rules read)."""
    path = MODULES[module]
    text = path.read_text()
    if path.suffix == ".pyx":
        text = "\n".join(line if PYTHON_IMPORT.match(line) else ""
                         for line in text.splitlines())
    return text


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
    visit(ast.parse(source(module), str(path)))
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


@pytest.mark.parametrize("entry", sorted(ALLOWED))
@pytest.mark.xdist_group("architecture")
def test_allowed_entries_are_still_needed(entry):
    module, target = entry
    assert target in import_graph().get(module, {}), \
        f"{module} no longer imports {target}: remove the entry from ALLOWED"


@pytest.mark.xdist_group("architecture")
def test_annotations_do_not_run_up_a_floor():
    """An import under `if TYPE_CHECKING:` is still a reader's arrow: it may not point up."""
    upward = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {m} -> {t}"
              for m, targets in import_graph(annotations=True).items()
              for t, line in targets.items() if floor(t) > floor(m)]
    assert upward == []


# What a front end may import besides its own package and the other front ends: the use
# cases, the renderers and the leaf utilities.
FRONT_ENDS = ("stepc.cli", "stepc.mcp", "stepc.lsp")
FRONT_ENDS_MAY_IMPORT = ("stepc.app", "stepc.report", "stepc.codes", "stepc.diagnostics",
                         "stepc.outputs", "stepc.source", "stepc.spelling", "stepc.tables",
                         "stepc.hw.memory")


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.xdist_group("architecture")
def test_front_ends_enter_through_the_use_cases():
    outside = [where(m, t) for m, targets in import_graph().items() if within(m, FRONT_ENDS)
               for t in targets
               if t != "stepc" and not within(t, FRONT_ENDS + FRONT_ENDS_MAY_IMPORT)]
    assert outside == []


def api_imports(module: str) -> list[tuple[int, str]]:
    """(line, name) of each name `module` takes from stepc.api or one of its submodules."""
    found = []
    for node in ast.walk(ast.parse(source(module))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                node.module.startswith("stepc.api"):
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith("stepc.api.")]
    return found


@pytest.mark.xdist_group("architecture")
def test_outside_the_api_only_its_public_names_are_imported():
    import stepc.api
    public = {f"stepc.api.{name}" for name in stepc.api.__all__}
    private = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {name}"
               for m in MODULES if not within(m, ("stepc.api",))
               for line, name in api_imports(m) if name not in public]
    assert private == []


def string_registries() -> dict[str, dict[str, int]]:
    """Modules named by string in a module-level table (`"stepc.x.y"` or
    `"stepc.x.y:attr"`), resolved like imports: module -> {named module: line}."""
    found: dict[str, dict[str, int]] = {}
    for module in MODULES:
        for node in ast.parse(source(module)).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            for const in ast.walk(node):
                if isinstance(const, ast.Constant) and isinstance(const.value, str) and \
                        const.value.startswith("stepc.") and " " not in const.value:
                    name = const.value.partition(":")[0]
                    found.setdefault(module, {})[name] = const.lineno
    return found


def defines(module: str, attr: str) -> bool:
    tree = ast.parse(source(module))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
    return attr in names


def named_attributes(tree: ast.AST) -> set[tuple[str, str]]:
    """(module, attribute) pairs named as `"stepc.x:attr"` or `("stepc.x", "attr")`."""
    pairs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith("stepc.") and ":" in node.value:
            pairs.add(tuple(node.value.split(":", 1)))
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts) \
                and node.elts[0].value.startswith("stepc.") and node.elts[1].value.isidentifier():
            pairs.add((node.elts[0].value, node.elts[1].value))
    return pairs


@pytest.mark.xdist_group("architecture")
def test_string_registries_name_real_modules_below_them():
    """Tables that name a module by string (the command table, the package's and the API's
    lazy names, the lowering families) are imports a reader cannot grep: each name resolves
    to a module (and attribute) of stepc, on its table's floor or below. The package root's
    lazy names are the API's public face: they count from the API's floor."""
    bad = []
    for module, named in string_registries().items():
        path = MODULES[module].relative_to(PACKAGE.parent)
        text = source(module)
        home = floor("stepc.api") if module == "stepc" else floor(module)
        for name, line in named.items():
            if name not in MODULES:
                bad.append(f"{path}:{line}: {name!r} is no module of stepc")
            elif floor(name) > home:
                bad.append(f"{path}:{line}: {module} -> {name} runs up a floor")
        for name, attr in named_attributes(ast.parse(text)):
            if name in MODULES and not defines(name, attr):
                bad.append(f"{path}: {name}:{attr}: {name} defines no {attr}")
    assert bad == []


@pytest.mark.xdist_group("architecture")
def test_the_string_registries_are_found():
    """The scan above sees the tables it is meant to (a test that it cannot pass vacuously)."""
    tables = string_registries()
    assert {"stepc", "stepc.api", "stepc.cli.group", "stepc.torch.families"} <= set(tables)
    assert "stepc.cli.sim" in tables["stepc.cli.group"]
