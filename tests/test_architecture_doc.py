"""docs/ARCHITECTURE.md says what the code is: every path it names exists, every `module.name`
or `file.py:name` it names is defined in that module, and its table of core's floors is the
one tests/test_layers.py holds the imports to."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from test_layers import CORE_FLOORS

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
ROOTS = {
    "core": "core",
    "db": "db",
    "workers": "workers",
    "studio": "studio",
    "optistudio": "optistudio",
    "migrations": "migrations",
    "tests": "tests",
    "services": "optistudio/services",
    "cli": "optistudio/cli",
}
"""A named path's first folder -> where it lies in the repository (the doc names the services
and the CLI by their room, as `services/...` and `cli/...`)."""
NAMED = re.compile(r"(?<![\w/.-])((?:" + "|".join(ROOTS) + r")/[\w/.<>*:-]*)")


def named_paths(text: str) -> list[str]:
    """Every path of ours the text names (`core/data/batch.py`, `workers/jobs.py:run_job`,
    `core/data/batch.batch_axis`), without trailing punctuation, templates (`<name>`) left out."""
    found = (match.rstrip(".:,") for match in NAMED.findall(text))
    return sorted({path for path in found if "<" not in path})


def _split(path: str) -> tuple[str, str | None]:
    """`dir/file.py:name` or `dir/module.name` -> (the file or folder, the name or None)."""
    if ":" in path:
        where, name = path.split(":", 1)
        return where, name
    head, _, last = path.rpartition("/")
    stem, dot, name = last.partition(".")
    if dot and name not in {"py", "md", "json", "toml"} and "*" not in last:
        return f"{head}/{stem}.py", name
    return path, None


def _defines(module: Path, name: str) -> bool:
    """Whether the module binds `name` at its top level (a def, class, assignment or import)."""
    tree = ast.parse(module.read_text(), filename=str(module))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = {node.name}
        elif isinstance(node, ast.Assign):
            bound = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound = {node.target.id}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound = {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        else:
            continue
        if name in bound:
            return True
    return False


def problems(paths: list[str], repo: Path) -> Iterator[str]:
    """Each named path that does not hold, as a sentence naming it."""
    for path in paths:
        where, name = _split(path)
        root, _, rest = where.partition("/")
        local = repo / ROOTS[root] / rest
        if name is not None and not local.exists():  # `package.name`: its __init__.py
            local = local.with_suffix("") / "__init__.py"
        matches = sorted(local.parent.glob(local.name)) if "*" in local.name else [local]
        if not matches or not all(m.exists() for m in matches):
            yield f"{path}: {ROOTS[root]}/{rest} does not exist"
        elif name is not None and not _defines(local, name.split(".")[0]):
            yield f"{path}: {ROOTS[root]}/{rest} defines no {name.split('.')[0]!r}"


def floor_table(text: str) -> dict[str, int]:
    """The doc's floor table: each package or leaf module of core (`model/`, `errors.py`) -> its
    floor."""
    lines = text.split("\n")
    start = lines.index("| floor | package | what is in it | a new ... goes here |")
    floors: dict[str, int] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        floor, cell = (part.strip() for part in line.strip("|").split("|")[:2])
        for name in re.findall(r"`(\w+)(?:\.py|/)`", cell):
            floors[name] = int(floor)
    return floors


def test_every_path_the_architecture_names_exists() -> None:
    text = DOC.read_text()

    assert list(problems(named_paths(text), REPO)) == []


def test_the_floor_table_is_the_layers_tests() -> None:
    held = {name: index for index, floor in enumerate(CORE_FLOORS) for name in floor}

    assert floor_table(DOC.read_text()) == held


def test_a_path_that_drifted_is_named() -> None:
    text = (
        "The job runs in `workers/jobs.py:run_job` (`workers/jobs.py:no_such_function`), "
        "its rows in db/models.py. Axes: `core/data/batch.batch_axis`, "
        "`core/data/batch.not_there`; gone: `studio/no_such_page.py`, `services/gone.py`, "
        "`tests/test_nothing*.py`; a template: `core/passes/<name>.py`."
    )

    found = list(problems(named_paths(text), REPO))

    assert found == [
        "core/data/batch.not_there: core/data/batch.py defines no 'not_there'",
        "services/gone.py: optistudio/services/gone.py does not exist",
        "studio/no_such_page.py: studio/no_such_page.py does not exist",
        "tests/test_nothing*.py: tests/test_nothing*.py does not exist",
        "workers/jobs.py:no_such_function: workers/jobs.py defines no 'no_such_function'",
    ]
