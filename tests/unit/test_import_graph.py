"""The package's import graph has no circle, and the layers point one way.

Read statically (``ast``), so every module counts, not only those a test happens to import
first. An edge is any import the module holds: at module level, in ``try``/``if`` bodies, under
``if TYPE_CHECKING:`` and inside functions alike, plus the packages Python imports before a
module it names (importing ``aiokprod.network.nodes`` loads ``aiokprod.network`` first); a
module's own enclosing packages are not edges. A circle hidden behind ``TYPE_CHECKING`` or a
function-level import is still two modules that cannot be understood apart, and it makes the
import order matter the day someone moves the import; a layer importing one above it, even
lazily, is the same knot across packages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = pytest.mark.static

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aiokprod"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _load_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _load_time_statements(node.body)
            yield from _load_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody,
                          *(h.body for h in node.handlers)):
                yield from _load_time_statements(block)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _with_parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & MODULES.keys()


def _every_import(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def imports_of(module: str) -> set[str]:
    """Modules of the package that ``module`` imports anywhere in its text."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in _every_import(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _with_parents(alias.name)
        else:
            target = _resolve(module, node)
            found |= _with_parents(target)
            for alias in node.names:
                found |= _with_parents(f"{target}.{alias.name}")
    # a module's own packages are loaded before it starts, and a package importing its own
    # modules (re-exporting them) is no circle: those edges are left out
    return found - _with_parents(module)


GRAPH = {m: imports_of(m) for m in MODULES}


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components of more than one module are circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    assert len(GRAPH) > 60
    assert "aiokprod.errors" in GRAPH["aiokprod.network.connection"]
    assert "aiokprod.network.connection" in GRAPH["aiokprod.network.cluster"]
    # an import under TYPE_CHECKING is an edge
    assert "aiokprod.record_metadata" in GRAPH["aiokprod.hooks"]
    # and so is one inside a function
    assert "aiokprod.producer.producer" in GRAPH["aiokprod.fastapi"]


# Each top-level module or package of aiokprod in a layer; a module may import its own layer
# and the layers below it, never one above. From the bottom: values, errors and hooks every
# layer names; the wire protocol; record batches; connections to brokers; the configuration
# (which names the network's settings); the metrics; the producer; what users run it in.
LAYERS: list[set[str]] = [
    {"_error_codes", "_error_base", "_broker_errors", "errors", "_version", "_backoff", "_waits",
     "_native", "_sensors", "_protobuf", "_murmur2", "record_metadata", "hooks", "settings",
     "_config_rules", "_devbroker_binary"},
    {"protocol"},
    {"records"},
    {"network"},
    {"config"},
    {"metrics", "telemetry"},
    {"producer"},
    {"spark", "fastapi", "otel", "cli", "__main__", "_perf", "devbroker", "_devbroker_probe",
     "schema_registry", ""},
]


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    found = [i for i, layer in enumerate(LAYERS) if top in layer]
    assert found, f"{module}: its top-level name {top!r} is in no layer of LAYERS"
    return found[0]


def test_every_module_has_a_layer() -> None:
    for module in GRAPH:
        _layer(module)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() for d in deps
                    if _layer(d) > _layer(m))
    assert upward == []


def test_the_producer_folders_form_no_circle() -> None:
    """``aiokprod/producer/`` is laid out by stage (docs/architecture.md): its folders and its
    top-level modules, each taken as one room, import one another one way only, so that the
    layout shows the order of the stages and the shared objects under them."""
    def room(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "producer" else None

    rooms: dict[str, set[str]] = {}
    for module, deps in GRAPH.items():
        here = room(module)
        if here is not None:
            rooms.setdefault(here, set()).update(
                r for r in map(room, deps) if r is not None and r != here)
    assert len(rooms) > 8
    assert _strongly_connected(rooms) == []


def test_tools_do_not_import_the_tests() -> None:
    """``tools/`` is what builds and checks the package; reaching into ``tests/`` (its fixtures,
    through ``sys.path``) would make a tool depend on the suite it serves."""
    offenders = []
    for path in sorted((ROOT / "tools").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _every_import(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in ("tests", "support", "conftest")]
        offenders += [f"{path.name}: sys.path names tests/" for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and node.value == "tests"]
    assert offenders == []


def test_no_import_circle() -> None:
    assert _strongly_connected(GRAPH) == []


def test_the_circle_finder_finds_one() -> None:
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]]


def test_no_module_imports_a_name_from_the_package_root() -> None:
    """``aiokprod/__init__.py`` is the public face and loads names lazily from the modules;
    a module importing from it when it loads (``from aiokprod import __version__``) closes a
    circle through that laziness. Submodules (``from aiokprod import errors``) are fine."""
    offenders = []
    for module, path in MODULES.items():
        if module == "aiokprod":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _load_time_statements(tree.body):
            if isinstance(node, ast.ImportFrom) and _resolve(module, node) == "aiokprod":
                offenders += [f"{module}: {a.name}" for a in node.names
                              if f"aiokprod.{a.name}" not in MODULES]
    assert offenders == []


@pytest.mark.parametrize(("module", "forbidden"), [
    ("aiokprod.network.cluster", "aiokprod.config"),
    ("aiokprod.network.connection", "aiokprod.config"),
])
def test_the_network_layer_does_not_import_the_configuration(module: str,
                                                             forbidden: str) -> None:
    assert forbidden not in GRAPH[module]


def test_no_network_module_imports_the_producer() -> None:
    network = [m for m in GRAPH if m.startswith("aiokprod.network.")]
    assert network
    upward = {m: sorted(d for d in GRAPH[m]
                        if d.startswith(("aiokprod.producer", "aiokprod.config")))
              for m in network}
    assert {m: d for m, d in upward.items() if d} == {}
