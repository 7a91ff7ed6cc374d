"""Hostile, odd and randomly broken uploads through the studio's own entry, `add_upload`
(issue 39, item 5).

Each case must end in a stored model or a ModelRejected with a message naming no server
path; never another exception. After each: nothing left in DATA_DIR/incoming, nothing
written anywhere in the sandbox (a folder three levels above the data folder, which is also the
working folder) but the artifact store and the database, and nothing at the absolute paths
the members name. The named classes are the review's; the mutations are seeded, so a failure
names a case that fails again. About 30 s in all.
"""

from __future__ import annotations

import io
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_models import (
    external_bytes,
    genai_config,
    many_nodes_bytes,
    tiny_bytes,
    zipped,
)

from optistudio.core.errors import ModelRejected
from optistudio.services.catalog import add_upload
from optistudio.services.settings import Settings

Upload = tuple[str, bytes]
OUTSIDE = Path("/tmp") / f"optistudio-fuzz-{uuid.uuid4().hex}"
"""An absolute path members and configs name: it must never come to exist."""
MODEL_MUTATIONS = 30
ZIP_MUTATIONS = 30
NODE_CAP = 1_000
"""OPTISTUDIO_MAX_NODES for the many-nodes case: the default's 100,001 nodes take 4 s to build."""
ODD_NAMES = [
    "../escape.onnx",
    "../../../../escape.onnx",
    f"{OUTSIDE}/abs.onnx",
    "a" * 300 + ".onnx",
    "d/" * 600 + "deep.onnx",
    ".hidden.onnx",
    "model.onnx/",
    "dir/../../escape.bin",
    "x\\..\\..\\escape.onnx",
    "model.onnx",
    "weights.bin",
    "genai_config.json",
    "",
]


def _refused_classes() -> dict[str, Callable[[], Upload]]:
    """Uploads that must be refused: storing them would read or write outside the folder."""
    graph, data = external_bytes("w.bin")
    colliding, _ = external_bytes("model.onnx")
    refused_graph, _ = external_bytes(str(OUTSIDE / "w.bin"))
    return {
        "zip-slip-member": lambda: ("m.zip", zipped([("../../escape.onnx", tiny_bytes())])),
        "absolute-member": lambda: ("m.zip", zipped([(f"{OUTSIDE}/x.onnx", tiny_bytes())])),
        "symlink-graph": lambda: ("m.zip", zipped([], links={"model.onnx": "/etc/hostname"})),
        "absolute-external-data": lambda: ("m.zip", zipped([("model.onnx", refused_graph)])),
        "dotdot-external-data": lambda: (
            "m.zip",
            zipped([("m/model.onnx", external_bytes("../w.bin")[0]), ("w.bin", data)]),
        ),
        "external-data-named-model.onnx": lambda: (
            "m.zip",
            zipped(
                [
                    ("genai_config.json", genai_config("x.onnx")),
                    ("x.onnx", colliding),
                    ("model.onnx", refused_graph),
                ]
            ),
        ),
        "genai-config-absolute": lambda: (
            "m.zip",
            zipped([("genai_config.json", genai_config(str(OUTSIDE / "x.onnx")))]),
        ),
        "genai-config-dotdot": lambda: (
            "m.zip",
            zipped([("m/genai_config.json", genai_config("../../../x.onnx"))]),
        ),
        "empty-zip": lambda: ("m.zip", zipped([])),
        "dirs-only-zip": lambda: ("m.zip", zipped([("a/", b""), ("a/b/", b"")])),
        "many-members": lambda: ("m.zip", zipped([(f"f{i}", b"") for i in range(20_000)])),
        "many-nodes": lambda: ("many.onnx", many_nodes_bytes(NODE_CAP + 1)),
        "not-a-zip": lambda: ("m.zip", b"PK\x03\x04" + bytes(200)),
        "zip-in-zip": lambda: ("m.zip", zipped([("inner.zip", zipped([("model.onnx", graph)]))])),
    }


def _odd_classes() -> dict[str, Callable[[], Upload]]:
    """Odd names and shapes: refused in a sentence, or stored under a name of our choosing."""
    tiny = tiny_bytes()
    graph, _ = external_bytes("w.bin")
    return {
        # Extracted as a file holding the link's text, never followed: harmless either way.
        "symlink-data": lambda: (
            "m.zip",
            zipped([("model.onnx", graph)], links={"w.bin": str(OUTSIDE / "w.bin")}),
        ),
        "upload-named-dotdot": lambda: ("..", tiny),
        "upload-named-dot": lambda: (".", tiny),
        "upload-named-empty": lambda: ("", tiny),
        "upload-named-slash-path": lambda: ("../../x.onnx", tiny),
        "upload-long-name": lambda: ("n" * 300 + ".onnx", tiny),
        "deep-path-member": lambda: ("m.zip", zipped([("d/" * 2100 + "model.onnx", tiny)])),
        "long-name-member": lambda: ("m.zip", zipped([("a" * 300 + ".onnx", tiny)])),
        "nested-metadata": lambda: ("m.onnx", tiny_bytes(names="[" * 100_000 + "]" * 100_000)),
        "duplicate-members": lambda: (
            "m.zip",
            zipped([("model.onnx", tiny), ("model.onnx", tiny)]),
        ),
    }


def _valid_folder() -> list[tuple[str, bytes]]:
    graph, data = external_bytes("weights.bin")
    return [
        ("folder/model.onnx", graph),
        ("folder/weights.bin", data),
        ("folder/genai_config.json", genai_config("model.onnx")),
    ]


def _mutated_bytes(data: bytes, rng: random.Random) -> bytes:
    """`data` with a few bytes flipped, cut short, grown or a span repeated."""
    at = rng.randrange(len(data))
    kind = rng.choice(["flip", "truncate", "insert", "repeat"])
    if kind == "flip":
        out = bytearray(data)
        for spot in rng.sample(range(len(data)), k=min(len(data), rng.randint(1, 8))):
            out[spot] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]
    return data[:at] + data[at : at + 256] * rng.randint(2, 50) + data[at:]


def _mutated_folder(rng: random.Random) -> list[tuple[str, bytes]]:
    """The valid folder with one member renamed oddly, or one member's bytes mutated."""
    members = _valid_folder()
    index = rng.randrange(len(members))
    name, data = members[index]
    if rng.random() < 0.5:
        members[index] = ("folder/" + rng.choice(ODD_NAMES), data)
    else:
        members[index] = (name, _mutated_bytes(data, rng))
    return members


def _model_mutation(seed: int) -> Upload:
    return "m.onnx", _mutated_bytes(tiny_bytes(), random.Random(seed))


def _zip_mutation(seed: int) -> Upload:
    rng = random.Random(seed)
    if rng.random() < 0.3:  # the archive's own bytes broken
        return "m.zip", _mutated_bytes(zipped(_valid_folder()), rng)
    return "m.zip", zipped(_mutated_folder(rng))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One sandbox, settings and migrated database for the module's cases."""
    from optistudio.db.session import make_session_factory
    from optistudio.services.migrate import upgrade

    sandbox = tmp_path_factory.mktemp("sandbox")
    settings = Settings(data_dir=sandbox / "a" / "b" / "c" / "data", database_url="")
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    yield {
        "sandbox": sandbox,
        "settings": settings,
        "factory": make_session_factory(settings.database_url),
    }


def _outside_the_store(sandbox: Path, settings: Settings) -> dict[str, int]:
    """Every file and folder in the sandbox but the store, the database and the scratch."""
    kept = (settings.artifact_dir, settings.data_dir / "incoming")
    listing = {}
    for path in sandbox.rglob("*"):
        if any(path == k or path.is_relative_to(k) for k in kept):
            continue
        if path.parent == settings.data_dir and path.name.startswith("optistudio.db"):
            continue
        listing[str(path.relative_to(sandbox))] = path.lstat().st_size if path.is_file() else -1
    return listing


def upload(store: dict[str, Any], case: Upload, monkeypatch: pytest.MonkeyPatch) -> str:
    """'stored' or 'refused'; any other exception fails the test. Checks what it left."""
    sandbox, settings = store["sandbox"], store["settings"]
    monkeypatch.chdir(sandbox)
    before = _outside_the_store(sandbox, settings)
    filename, data = case
    try:
        add_upload(store["factory"], settings, io.BytesIO(data), filename=filename)
        outcome = "stored"
    except ModelRejected as exc:
        assert exc.message.strip() and "Traceback" not in exc.message, exc.message
        for text in (exc.message, exc.hint or ""):
            assert str(sandbox) not in text, text
        outcome = "refused"
    assert list((settings.data_dir / "incoming").iterdir()) == []
    assert _outside_the_store(sandbox, settings) == before
    assert not OUTSIDE.exists()
    return outcome


REFUSED = _refused_classes()
ODD = _odd_classes()


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_hostile_upload_is_refused_in_a_sentence(
    store: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPTISTUDIO_MAX_NODES", str(NODE_CAP))
    assert upload(store, REFUSED[name](), monkeypatch) == "refused"


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")
@pytest.mark.parametrize("name", list(ODD))
def test_an_odd_upload_is_refused_or_stored(
    store: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(store, ODD[name](), monkeypatch)


@pytest.mark.parametrize("seed", range(MODEL_MUTATIONS))
def test_a_mutated_model_is_refused_or_stored(
    store: dict[str, Any], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(store, _model_mutation(seed), monkeypatch)


@pytest.mark.parametrize("seed", range(ZIP_MUTATIONS))
def test_a_mutated_zip_is_refused_or_stored(
    store: dict[str, Any], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(store, _zip_mutation(seed), monkeypatch)


def test_the_valid_bases_are_stored(store: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutations start from uploads that are accepted: the fuzz is not all refusals."""
    assert upload(store, ("tiny.onnx", tiny_bytes()), monkeypatch) == "stored"
    assert upload(store, ("folder.zip", zipped(_valid_folder())), monkeypatch) == "stored"
