"""Blame where it belongs (issue 44, item 4), in real headless Chromium against a real
`optistudio up` stack: a file ONNX Runtime refuses, uploaded as the user's own, is refused with
the hint to check it on their machine; the same bytes stored as a variant the studio made (as an
optimize job stores its variants: a parent and the recipe that made it) fail a benchmark on the
real worker with an error that names the pass and calls it the studio's bug, and never sends the
user to check their machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, last_id, shot, upload

from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from tests.conftest import unloadable

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]

RECIPE = BUILTIN_RECIPES["int8_static"]
YOUR_MACHINE = "on your machine"


def store_variant(settings: object, original: Path, made: Path) -> int:
    """`original` as the user's model and `made` as a variant of it by RECIPE, stored as an
    optimize job stores one (origin 'variant', its parent, its recipe and precision); its id."""
    from optistudio.db.session import make_session_factory
    from optistudio.services.catalog import add_model_file

    factory = make_session_factory(settings.database_url)  # type: ignore[attr-defined]
    parent = add_model_file(factory, settings, original, name=original.stem, origin="cli")  # type: ignore[arg-type]
    return add_model_file(
        factory,
        settings,  # type: ignore[arg-type]
        made,
        name=f"{original.stem} · {RECIPE.name}",
        origin="variant",
        parent_id=parent.model_id,
        recipe=RECIPE.model_dump(mode="json"),
        precision="int8",
    ).model_id


def test_a_file_the_studio_made_names_the_pass_the_users_own_their_machine(
    studio: Studio, page, studio_settings, own_model, tiny_model: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    made = own_model(unloadable(tmp_path / "int8.onnx"))
    page.goto(studio.url)
    expect(page.get_by_role("heading", name="Models")).to_be_visible(timeout=UI_TIMEOUT_MS)
    upload(page, made)  # as the user's own file: their machine is the place to check it
    refusal = page.locator("[data-testid='stAlertContentError']")
    expect(refusal).to_contain_text("Model refused: ONNX Runtime could not load the model")
    expect(refusal).to_contain_text(YOUR_MACHINE)

    variant = store_variant(studio_settings, own_model(tiny_model), made)
    job = last_id(studio, "jobs") + 1
    page.goto(f"{studio.url}/models?model={variant}")
    page.get_by_role("button", name="Benchmark").click(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text(re.compile(rf"Benchmark job #{job} submitted\."))).to_be_visible()

    page.goto(f"{studio.url}/jobs")
    failed = re.compile(rf"Job #{job} · Benchmark · .* — failed")
    expect(page.get_by_text(failed)).to_be_visible(timeout=2 * UI_TIMEOUT_MS)
    card = page.get_by_test_id("stVerticalBlock")  # the innermost block holding the job line
    card = card.filter(has_text=failed).last
    error = card.locator("[data-testid='stAlertContentError']")
    passes = " + ".join(step.step for step in RECIPE.steps)
    expect(error).to_contain_text(f"The INT8 file the studio made with {passes} failed to load: ")
    expect(error).to_contain_text("This is a bug in Optistudio's pass, not your model")
    expect(card.get_by_text(YOUR_MACHINE, exact=False)).to_have_count(0)
    shot(page, "jobs-blame-the-pass")
    assert "Traceback" not in page.content()
