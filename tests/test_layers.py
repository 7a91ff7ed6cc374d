"""The house's import directions hold (docs/ARCHITECTURE.md).

Every module of ours is `optistudio.<room>...`. Rooms sit on floors; an import may go to the same
room or to a lower floor, never up, and no set of modules imports itself round in a circle.
Inside core the capability packages have floors of their own (CORE_FLOORS). Imports inside
functions may bring in heavy optional libraries, never a module of ours (that hides a circle).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOM_FOLDERS = {
    "optistudio.core": REPO / "core",
    "optistudio.db": REPO / "db",
    "optistudio.migrations": REPO / "migrations",
    "optistudio.workers": REPO / "workers",
    "optistudio.studio": REPO / "studio",
    "optistudio": REPO / "optistudio",
}

# Which rooms each room may import (besides itself). Entry points (cli) sit on top.
ALLOWED: dict[str, set[str]] = {
    "optistudio.core": set(),
    "optistudio.db": set(),
    "optistudio.migrations.versions": set(),
    "optistudio.migrations": {"optistudio.db"},
    "optistudio.services": {"optistudio.core", "optistudio.db", "optistudio.migrations"},
    "optistudio.workers": {"optistudio.core", "optistudio.db", "optistudio.services"},
    "optistudio.studio": {
        "optistudio.core",
        "optistudio.db",
        "optistudio.services",
        "optistudio.workers.app",
    },
    "optistudio.cli": {
        "optistudio.core",
        "optistudio.db",
        "optistudio.services",
        "optistudio.workers",
        "optistudio.studio",
        "optistudio.migrations",
    },
    "optistudio": {"optistudio.core"},  # the Python face: optistudio/__init__.py
}
THIRD_PARTY_FORBIDDEN = {
    "optistudio.core": {"streamlit", "celery", "sqlalchemy", "alembic", "redis"},
    "optistudio.db": {"streamlit", "celery"},
    "optistudio.services": {"streamlit"},
    "optistudio.workers": {"streamlit"},
}

# core's capability packages, lowest floor first; the leaves (errors, registry, ...) are floor 0.
# Every package and loose module under core/ is on exactly one floor (core_tree, checked by
# test_every_core_package_is_on_one_floor).
CORE_FLOORS = [
    {"errors", "registry", "progress", "metrics", "loader"},
    {"model"},
    {"data"},
    {"machine"},
    {"backends"},
    {"llm"},
    {"numerics"},
    {"measure"},
    {"fusion", "torch_bridge"},
    {"passes"},
    {"optimize"},
    {"batching"},
    {"video"},
    {"diagnose"},
    {"report"},
]
LOOSE_CORE_MODULES_AT_MOST = 8


def module_files() -> Iterator[tuple[str, Path]]:
    for prefix, folder in ROOM_FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            yield ".".join([prefix, *parts]), path


MODULES = dict(module_files())


def room_of(module: str) -> str:
    """The most specific key of ALLOWED that `module` lies in."""
    candidates = [room for room in ALLOWED if module == room or module.startswith(room + ".")]
    return max(candidates, key=len)


def is_ours(name: str) -> bool:
    return name == "optistudio" or name.startswith("optistudio.")


def resolve(name: str) -> str:
    """`optistudio.core.batching.pipeline.Pipeline` -> the module it names."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, *, top_level: bool) -> Iterator[str]:
    """Names imported at module level (top_level) or inside functions (not top_level)."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def visit(node: ast.AST, in_function: bool) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import) and inside != top_level:
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and inside != top_level and child.level == 0:
                assert child.module
                for alias in child.names:
                    yield f"{child.module}.{alias.name}"
            yield from visit(child, inside)

    yield from visit(tree, False)


def edges() -> Iterator[tuple[str, str]]:
    for module, path in MODULES.items():
        for name in imports(path, top_level=True):
            if is_ours(name):
                target = resolve(name)
                if target != module:
                    yield module, target


def core_floor(module: str) -> int:
    part = module.split(".")[2] if module.count(".") >= 2 else ""
    return next(i for i, floor in enumerate(CORE_FLOORS) if part in floor)


def test_every_room_imports_only_the_rooms_below_it() -> None:
    offenders = sorted(
        f"{source} -> {target}"
        for source, target in edges()
        if room_of(target) != room_of(source)
        and not any(
            target == allowed or target.startswith(allowed + ".")
            for allowed in ALLOWED[room_of(source)]
        )
        and not (room_of(source) == "optistudio" and target.startswith("optistudio.core"))
    )
    assert offenders == []


def test_core_capabilities_import_only_lower_floors() -> None:
    core_edges = [
        (s, t)
        for s, t in edges()
        if s.startswith("optistudio.core.") and t.startswith("optistudio.core.")
    ]
    offenders = sorted(
        f"{s} -> {t}"
        for s, t in core_edges
        if s.split(".")[2] != t.split(".")[2]
        and (core_floor(t) > core_floor(s) or core_floor(t) == core_floor(s) != 0)
    )
    assert offenders == []


def test_no_import_circles() -> None:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for source, target in edges():
        graph[source].add(target)
    circles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert circles == []


@pytest.mark.parametrize("room", sorted(THIRD_PARTY_FORBIDDEN), ids=str)
def test_room_does_not_import_forbidden_libraries(room: str) -> None:
    offenders = {
        module: sorted({name.split(".")[0] for name in imports(path, top_level=True)} & banned)
        for module, path in MODULES.items()
        if room_of(module) == room or module.startswith(room + ".")
        for banned in [THIRD_PARTY_FORBIDDEN[room]]
    }
    offenders |= {
        module: sorted({name.split(".")[0] for name in imports(path, top_level=False)} & banned)
        for module, path in MODULES.items()
        if module.startswith(room + ".")
        for banned in [THIRD_PARTY_FORBIDDEN[room]]
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_module_of_ours_is_imported_inside_a_function_below_the_entry_points() -> None:
    offenders = sorted(
        f"{module} imports {name} in a function"
        for module, path in MODULES.items()
        if room_of(module) != "optistudio.cli"
        for name in imports(path, top_level=False)
        if is_ours(name)
    )
    assert offenders == []


def test_every_module_uses_the_one_import_name() -> None:
    bare = {"core", "db", "workers", "studio", "migrations"}
    offenders = sorted(
        f"{module} imports {name}"
        for module, path in MODULES.items()
        for top_level in (True, False)
        for name in imports(path, top_level=top_level)
        if name.split(".")[0] in bare
    )
    assert offenders == []


def test_core_top_level_reads_like_the_product() -> None:
    loose = sorted(p.name for p in (REPO / "core").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= LOOSE_CORE_MODULES_AT_MOST, loose


def core_tree() -> tuple[set[str], set[str]]:
    """What core/ holds, by name: its packages (folders of Python modules) and its loose
    modules (the leaves)."""
    core = REPO / "core"
    packages = {p.name for p in core.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    loose = {p.stem for p in core.glob("*.py") if p.name != "__init__.py"}
    return packages, loose


def floor_misplacements(floors: list[set[str]], packages: set[str], loose: set[str]) -> list[str]:
    """Each way `floors` disagrees with the tree, as a sentence: a package or loose module on no
    floor, a name on a floor that core/ lacks, a name on two floors, a leaf above floor 0."""
    placed = [name for floor in floors for name in sorted(floor)]
    tree = packages | loose
    return [
        *(
            f"core/{name} is on no floor: add it to CORE_FLOORS"
            for name in sorted(tree - {*placed})
        ),
        *(
            f"{name!r} is on a floor but core/ has no such package or module: remove it"
            for name in sorted({*placed} - tree)
        ),
        *(
            f"{name!r} is on {placed.count(name)} floors: keep it on one"
            for name in sorted({n for n in placed if placed.count(n) > 1})
        ),
        *(
            f"core/{name}.py is a leaf: its floor is 0"
            for index, floor in enumerate(floors)
            if index > 0
            for name in sorted(floor & loose)
        ),
    ]


def test_every_core_package_is_on_one_floor() -> None:
    packages, loose = core_tree()

    assert floor_misplacements(CORE_FLOORS, packages, loose) == []


def test_the_floor_check_names_what_is_missing_absent_doubled_or_misplaced() -> None:
    floors = [{"errors"}, {"model", "metrics"}, {"llm"}, {"llm", "face"}]

    found = floor_misplacements(
        floors, packages={"model", "llm", "data"}, loose={"errors", "metrics"}
    )

    assert found == [
        "core/data is on no floor: add it to CORE_FLOORS",
        "'face' is on a floor but core/ has no such package or module: remove it",
        "'llm' is on 2 floors: keep it on one",
        "core/metrics.py is a leaf: its floor is 0",
    ]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert sorted(sorted(c) for c in strongly_connected(graph) if len(c) > 1) == [["a", "b", "c"]]


def _doc_table(heading: str) -> dict[str, set[str]]:
    """The rows of the docs/ARCHITECTURE.md table whose header's first cell is `heading`:
    each first cell (`model/`) to the set of names in the second, comments in parentheses
    left out."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    lines = text.split("\n")
    start = lines.index(f"| {heading} | imports |")
    rows: dict[str, set[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name, cell = (part.strip() for part in line.strip("|").split("|")[:2])
        plain = re.sub(r"\([^)]*\)", "", cell)
        rows[name.strip("`").rstrip("/")] = {w.strip(" `") for w in plain.split(",") if w.strip()}
    return rows


def test_the_architecture_tables_say_who_imports_whom() -> None:
    """docs/ARCHITECTURE.md's two tables are the graph: core's packages by their module-level
    imports (the floor-0 modules read as 'leaves'), the rooms by every import of ours."""
    core: dict[str, set[str]] = {}
    for source, target in edges():
        if source.startswith("optistudio.core.") and target.startswith("optistudio.core."):
            a, b = (_core_package(m) for m in (source, target))
            if a != b and a != "leaves":
                core.setdefault(a, set()).add(b)
    rooms: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        for name in [*imports(path, top_level=True), *imports(path, top_level=False)]:
            if is_ours(name):
                a, b = _room_name(module), _room_name(resolve(name))
                if a != b and a != "core":
                    rooms.setdefault(a, set()).add(b)

    assert _doc_table("package") == core
    assert _doc_table("room") == rooms


def _core_package(module: str) -> str:
    part = module.split(".")[2]
    return "leaves" if part in CORE_FLOORS[0] else part


def _room_name(module: str) -> str:
    room = room_of(module)
    if room == "optistudio":
        return "optistudio/__init__.py"
    return room.split(".")[1]
