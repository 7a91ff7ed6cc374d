"""Hostile files through the Models page, as a new user of a shared studio would send them
(issue 39), in real headless Chromium against a real `optistudio up` stack: a folder .zip whose
external data takes the stored graph's name (case 1), a genai_config.json naming /etc/passwd
(case 3), a model over the node cap (case 5, the cap lowered for this stack), an empty and a
folders-only .zip (case 7), and an .npz bomb as an input's value (case 4). Each is refused in
one error box holding one sentence and its hint (no traceback, no server path), the studio
answers a reload, and the model list is the one model stored before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import MODEL_UPLOADER, UI_TIMEOUT_MS, Studio, give, idle, shot, upload
from hostile_models import external_bytes, genai_config, many_nodes_bytes, zipped
from npz_bombs import npz_bomb

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NODE_CAP = 100
"""OPTISTUDIO_MAX_NODES of this stack: a model over it is 101 Identity nodes, not 100,001."""
STACK = {"OPTISTUDIO_MAX_NODES": str(NODE_CAP)}
ERROR_BOX = "[data-testid='stAlertContentError']"


def _hostile_files(folder: Path) -> dict[str, tuple[Path, str]]:
    """Each hostile upload, written to `folder`, with the refusal it must give (a regex)."""
    colliding, _ = external_bytes("model.onnx")
    refused_graph, _ = external_bytes(str(folder / "outside" / "w.bin"))
    files = {
        "weights-named-model.onnx": (
            "swap.zip",
            zipped(
                [
                    ("genai_config.json", genai_config("x.onnx")),
                    ("x.onnx", colliding),
                    ("model.onnx", refused_graph),
                ]
            ),
            r"External data location 'model\.onnx' is the name the graph",
        ),
        "config-naming-etc-passwd": (
            "decoder.zip",
            zipped([("genai_config.json", genai_config("/etc/passwd"))]),
            r"genai_config\.json names a model file .* not inside the folder",
        ),
        "over-the-node-cap": (
            "many.onnx",
            many_nodes_bytes(NODE_CAP),  # NODE_CAP Identity nodes and one more
            rf"holds {NODE_CAP + 1} nodes .* more than the {NODE_CAP} this studio checks",
        ),
        "empty-zip": ("empty.zip", zipped([]), r"The \.zip holds no files\."),
        "folders-only-zip": (
            "folders.zip",
            zipped([("a/", b""), ("a/b/", b"")]),
            r"The \.zip holds only folders\.",
        ),
    }
    written = {}
    for case, (name, data, refusal) in files.items():
        path = folder / case / name
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        written[case] = (path, refusal)
    return written


def _stored_models(data: Path) -> list[Path]:
    return [p for p in (data / "artifacts" / "models").glob("*/*") if p.is_dir()]


def _the_one_refusal(page, prefix: str, refusal: str, server_paths: list[str]) -> None:
    """One error box: `prefix`, a message matching `refusal` and its hint; nothing of a
    traceback or a server path on the page."""
    from playwright.sync_api import expect

    box = page.locator(ERROR_BOX)
    expect(box).to_have_count(1, timeout=UI_TIMEOUT_MS)
    text = box.inner_text()
    message, _, hint = text.partition("What to try:")
    assert re.match(rf"{prefix}.*{refusal}", message.strip(), re.S), text
    assert message.strip().endswith("."), text
    assert hint.strip(), f"no hint: {text}"
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and "Error:" not in body, body
    assert not [path for path in server_paths if path in body], body


def _still_up_with_one_model(page, studio: Studio, data: Path) -> None:
    """A reload answers, with the Models page and the one model stored before."""
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/models")
    expect(page.get_by_role("heading", name="Models")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Model card · tiny")).to_be_visible()
    idle(page)  # a file given while the page still runs is the likelier to be dropped
    assert len(_stored_models(data)) == 1
    assert list((data / "incoming").glob("*")) == []


@pytest.mark.parametrize("studio", [STACK], indirect=True)
def test_hostile_files_are_refused_in_a_sentence_and_change_nothing(
    studio: Studio, page, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    data = tmp_path / "data"
    server_paths = [str(tmp_path), "/etc/passwd"]
    page.goto(studio.url)
    expect(page.get_by_role("heading", name="Models")).to_be_visible(timeout=UI_TIMEOUT_MS)
    upload(page, tiny_model)
    expect(page.get_by_text("Stored as model #1.")).to_be_visible()

    for case, (path, refusal) in _hostile_files(tmp_path / "hostile").items():
        _still_up_with_one_model(page, studio, data)  # and a fresh uploader
        give(page.get_by_test_id("stFileUploader").filter(has_text=MODEL_UPLOADER), path)
        _the_one_refusal(page, "Model refused: ", refusal, server_paths)
        if case == "config-naming-etc-passwd":
            shot(page, "hostile-upload")

    _still_up_with_one_model(page, studio, data)
    bomb = npz_bomb(tmp_path / "value.npz", shape=(1, 1 << 24))  # 64 MiB of zeros, ~64 KB
    form = page.get_by_test_id("stFileUploader").filter(has_text="Array for x (.npz)")
    give(form, bomb)
    idle(page)
    page.get_by_role("button", name="Save input profile").click()
    _the_one_refusal(page, "Profile not saved: ", r"declares shape \[1, 16777216\]", server_paths)

    _still_up_with_one_model(page, studio, data)
    page.get_by_role("combobox", name="Model", exact=True).click()
    expect(page.get_by_role("option")).to_have_count(1)
    expect(page.get_by_role("option").first).to_contain_text("#1 · tiny")
