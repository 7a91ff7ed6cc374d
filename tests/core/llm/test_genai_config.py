"""genai_config.json for ONNX Runtime GenAI: kept from the exporter, or written from the card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.errors import ModelRejected
from optistudio.core.llm import read_card
from optistudio.core.llm.genai_config import genai_config_for, layer_pattern

SHAPE = TinyShape()


def test_a_config_written_from_the_card_names_what_genai_reads(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path, SHAPE, config=None)

    config, origin = genai_config_for(read_card(model), model)

    assert origin == "written from the model card"
    decoder = config["model"]["decoder"]
    assert (config["model"]["type"], config["model"]["vocab_size"]) == ("decoder", 64)
    assert config["model"]["context_length"] == 128  # the learned position table's rows
    assert (decoder["num_hidden_layers"], decoder["num_attention_heads"]) == (2, 4)
    assert (decoder["num_key_value_heads"], decoder["head_size"], decoder["hidden_size"]) == (
        2,
        16,
        64,
    )
    assert decoder["filename"] == "model.onnx"
    assert decoder["inputs"] == {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "position_ids": "position_ids",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    assert decoder["outputs"] == {
        "logits": "logits",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    assert config["search"]["past_present_share_buffer"] is False
    assert config["search"]["max_length"] == 128 and config["search"]["do_sample"] is False
    assert "eos_token_id" not in config["model"]  # nothing beside the model names it


def test_the_hugging_face_config_gives_the_type_and_token_ids(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path, SHAPE, config="hf")
    hf = json.loads((tmp_path / "config.json").read_text())
    hf |= {"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))

    config, _ = genai_config_for(read_card(model), model)

    assert config["model"]["type"] == "llama"
    assert (config["model"]["bos_token_id"], config["model"]["eos_token_id"]) == (1, [2, 7])


def test_an_unknown_model_type_is_served_as_a_generic_decoder(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path, SHAPE, config="hf")  # model_type "tiny"

    config, _ = genai_config_for(read_card(model), model)

    assert config["model"]["type"] == "decoder"


def test_the_exporters_config_is_kept_and_names_the_graph(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path, SHAPE, config="genai")
    renamed = model.rename(tmp_path / "int4.onnx")

    config, origin = genai_config_for(read_card(renamed), renamed)

    assert origin == "genai_config.json"
    assert config["model"]["decoder"]["filename"] == "int4.onnx"
    assert config["model"]["decoder"]["head_size"] == 16  # as the builder wrote it


@pytest.mark.parametrize(
    ("names", "pattern"),
    [
        (["past_key_values.0.key", "past_key_values.1.key"], "past_key_values.%d.key"),
        (["past.0.value", "past.1.value", "past.2.value"], "past.%d.value"),
        (["present.0.key"], "present.%d.key"),
    ],
    ids=["optimum", "short", "one-layer"],
)
def test_cache_names_become_layer_patterns(names: list[str], pattern: str) -> None:
    assert layer_pattern(names) == pattern


def test_names_without_a_layer_pattern_are_refused() -> None:
    with pytest.raises(ModelRejected, match="follow no pattern"):
        layer_pattern(["cache_a.key", "cache_b.key"])
