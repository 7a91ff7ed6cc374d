"""Intake of a decoder: its KV-cache interface, refusals with reasons, and its card."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from decoder_models import TinyShape, build_tiny_decoder, tiny_weights

from optistudio.core.errors import ModelRejected
from optistudio.core.llm import is_decoder, load_decoder_io, read_card

SHAPE = TinyShape()
WEIGHTS = tiny_weights(SHAPE)


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_decoder(tmp_path_factory.mktemp("tiny") / "fp32", SHAPE)


def test_the_interface_is_read_in_layer_order(tiny_decoder: Path) -> None:
    io = load_decoder_io(tiny_decoder)

    assert io.past_keys == ["past_key_values.0.key", "past_key_values.1.key"]
    assert io.present_values == ["present.0.value", "present.1.value"]
    assert io.position_ids == "position_ids"
    assert (io.cache.kv_heads, io.cache.head_dim, io.cache.dtype) == (2, 16, "float32")
    assert io.outputs[0] == "logits"


def _classifier(path: Path) -> Path:
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "not_a_decoder",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 8])],
    )
    onnx.save(helper.make_model(graph), path)
    return path


def test_a_model_without_a_cache_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = _classifier(tmp_path / "relu.onnx")

    with pytest.raises(ModelRejected, match="no input_ids or attention_mask input"):
        load_decoder_io(path)
    assert not is_decoder(onnx.load(str(path)))


def test_an_input_the_loop_cannot_feed_is_named(tiny_decoder: Path, tmp_path: Path) -> None:
    model = onnx.load(str(tiny_decoder))
    model.graph.input.append(
        onnx.helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    )
    onnx.save(model, tmp_path / "merged.onnx")

    with pytest.raises(ModelRejected, match="also needs use_cache_branch") as caught:
        load_decoder_io(tmp_path / "merged.onnx")
    assert caught.value.hint and "use_cache_branch" in caught.value.hint


def test_a_missing_present_is_refused(tiny_decoder: Path, tmp_path: Path) -> None:
    model = onnx.load(str(tiny_decoder))
    kept = [o for o in model.graph.output if o.name != "present.1.value"]
    model.graph.ClearField("output")
    model.graph.output.extend(kept)
    onnx.save(model, tmp_path / "broken.onnx")

    with pytest.raises(ModelRejected, match="skip a layer or lack a key or value"):
        load_decoder_io(tmp_path / "broken.onnx")


def test_the_card_reads_the_genai_config(tiny_decoder: Path) -> None:
    card = read_card(tiny_decoder)

    assert (card.layers, card.heads, card.kv_heads, card.head_dim) == (2, 4, 2, 16)
    assert (card.vocab, card.hidden, card.context_length) == (64, 64, 128)
    assert card.sources["heads"] == "genai_config.json"
    # 2 (key, value) x 2 layers x 2 KV heads x 16 x 4 bytes
    assert card.kv_bytes_per_token == 512
    assert card.size_bytes == tiny_decoder.stat().st_size


def test_the_parameter_split_counts_every_weight_once(tiny_decoder: Path) -> None:
    split = read_card(tiny_decoder).parameters

    assert split.embedding == WEIGHTS["embed"].size + WEIGHTS["positions"].size
    assert split.lm_head == WEIGHTS["lm_head"].size
    assert split.total == sum(value.size for value in WEIGHTS.values())
    assert not split.tied


@pytest.mark.parametrize("config", ["hf", None], ids=["config.json", "graph-only"])
def test_without_genai_config_the_facts_come_from_elsewhere(
    tmp_path: Path, config: str | None
) -> None:
    path = build_tiny_decoder(tmp_path, SHAPE, config=config)

    card = read_card(path)

    assert (card.heads, card.vocab, card.context_length) == (4, 64, 128)
    expected = "config.json" if config else "graph (hidden / head_dim)"
    assert card.sources["heads"] == expected


def test_the_config_wins_over_the_position_table(tmp_path: Path) -> None:
    path = build_tiny_decoder(tmp_path, SHAPE, config="hf")
    body = json.loads((tmp_path / "config.json").read_text()) | {"max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(body))

    assert read_card(path).context_length == 4096


def test_a_tied_lm_head_is_counted_once(tmp_path: Path) -> None:
    path = build_tiny_decoder(tmp_path, SHAPE, tied=True)

    split = read_card(path).parameters

    assert split.tied and split.lm_head == 0
    assert split.total == sum(v.size for k, v in WEIGHTS.items() if k != "lm_head")


def _symbolic_head_size(model_path: Path, target: Path) -> Path:
    """The tiny decoder with its caches' head size symbolic, as GenAI's model builder writes."""
    model = onnx.load(str(model_path))
    for value in [*model.graph.input, *model.graph.output]:
        if value.name.startswith(("past_key_values.", "present.")):
            value.type.tensor_type.shape.dim[3].dim_param = "head_size"
    onnx.save(model, target)
    return target


@pytest.mark.parametrize("config", ["genai", "hf"])
def test_a_symbolic_head_size_is_read_from_the_config(tmp_path: Path, config: str) -> None:
    built = build_tiny_decoder(tmp_path / "built", SHAPE, config=config)
    path = _symbolic_head_size(built, tmp_path / "built" / "symbolic.onnx")

    io = load_decoder_io(path)

    assert (io.cache.kv_heads, io.cache.head_dim) == (2, 16)


def test_a_symbolic_head_size_without_a_config_is_refused(tmp_path: Path) -> None:
    built = build_tiny_decoder(tmp_path / "built", SHAPE, config=None)
    path = _symbolic_head_size(built, tmp_path / "symbolic.onnx")

    with pytest.raises(ModelRejected, match="no config beside the model states them") as caught:
        load_decoder_io(path)
    assert caught.value.hint and "genai_config.json" in caught.value.hint
