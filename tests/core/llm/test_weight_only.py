"""Weight-only variants of the tiny decoder: MatMulNBits for ONNX Runtime, NNCF for OpenVINO."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.llm import greedy, load_decoder_io, open_decoder, read_card
from optistudio.core.llm.card import size_on_disk
from optistudio.core.llm.openvino_weights import NNCFWeightsConfig, compress_for_openvino
from optistudio.core.llm.perplexity import agreement
from optistudio.core.llm.weight_only import WeightOnlyConfig, quantize_weight_only

TEXT = np.random.default_rng(3).integers(0, 64, 192)
PROMPT = np.array([[5, 9, 17, 3]])

SHAPE = TinyShape()


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_decoder(tmp_path_factory.mktemp("tiny") / "fp32", SHAPE)


@pytest.fixture(scope="module")
def int4(tiny_decoder: Path) -> Path:
    target = tiny_decoder.parent.parent / "int4" / "model.onnx"
    quantize_weight_only(tiny_decoder, target, WeightOnlyConfig(bits=4, block_size=32))
    return target


def _nbits(path: Path) -> Counter[int]:
    """MatMulNBits nodes by their bits attribute."""
    nodes = [n for n in onnx.load(str(path)).graph.node if n.op_type == "MatMulNBits"]
    return Counter(next(a.i for a in n.attribute if a.name == "bits") for n in nodes)


def test_the_4_bit_variant_has_matmulnbits_and_a_third_of_the_size(
    tiny_decoder: Path, int4: Path
) -> None:
    # 7 weight MatMuls a layer x 2 layers at 4 bits; the LM head at 8
    assert _nbits(int4) == Counter({4: 14, 8: 1})
    assert size_on_disk(int4) <= 0.35 * size_on_disk(tiny_decoder)


def test_the_embedding_is_kept_at_8_bits(int4: Path) -> None:
    initializers = {t.name: t for t in onnx.load(str(int4)).graph.initializer}

    assert initializers["embed_int8"].data_type == onnx.TensorProto.INT8
    assert "embed" not in initializers


def test_the_variant_keeps_its_card(tiny_decoder: Path, int4: Path) -> None:
    original, variant = read_card(tiny_decoder), read_card(int4)

    assert variant.parameters == original.parameters
    assert variant.sources == original.sources  # its genai_config.json came along


def test_the_4_bit_variant_decodes_close_to_fp32(tiny_decoder: Path, int4: Path) -> None:
    result = agreement(open_decoder(tiny_decoder), open_decoder(int4), TEXT, window=64)

    assert result.perplexity_increase < 0.05
    assert result.top1_agreement > 0.5
    assert greedy(open_decoder(int4), PROMPT, 6).tokens.shape == (1, 6)


def test_8_bit_everywhere_stays_closer_than_4_bit(
    tiny_decoder: Path, int4: Path, tmp_path: Path
) -> None:
    int8 = tmp_path / "model.onnx"
    report = quantize_weight_only(tiny_decoder, int8, WeightOnlyConfig(bits=8, block_size=32))
    fp32 = open_decoder(tiny_decoder)

    close = agreement(fp32, open_decoder(int8), TEXT, window=64)
    far = agreement(fp32, open_decoder(int4), TEXT, window=64)

    assert _nbits(int8) == Counter({8: 15})
    assert report.matmuls == 15 and report.size_ratio < 0.4
    assert close.mean_kl < far.mean_kl
    # top-1 on a tiny random decoder is full of near-ties, which each CPU's kernels break their own
    # way (0.947 on an AMD EPYC with AVX-512): the guarantee is the distance, and a floor well clear
    assert close.top1_agreement >= max(far.top1_agreement, 0.9)


def test_nncf_int4_runs_on_openvino(tiny_decoder: Path, tmp_path: Path) -> None:
    target = compress_for_openvino(
        tiny_decoder, tmp_path / "model.xml", NNCFWeightsConfig(group_size=32)
    )
    io = load_decoder_io(tiny_decoder)

    session = open_decoder(target, backend="openvino", io=io)
    result = agreement(open_decoder(tiny_decoder), session, TEXT, window=64)

    # the weights (.bin); on a model this small the graph's text (.xml) outweighs them
    assert target.with_suffix(".bin").stat().st_size <= 0.35 * size_on_disk(tiny_decoder)
    assert result.perplexity_increase < 0.05


def test_a_tied_head_stays_in_float_and_keeps_its_table(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path / "fp32", SHAPE, tied=True)
    target = tmp_path / "int4" / "model.onnx"

    quantize_weight_only(model, target, WeightOnlyConfig(bits=4))

    initializers = {t.name for t in onnx.load(str(target)).graph.initializer}
    assert {"embed", "embed_int8"} <= initializers  # the Gather reads INT8, the head the float
    assert _nbits(target) == Counter({4: 14})
    assert greedy(open_decoder(target), PROMPT, 4).tokens.shape == (1, 4)


def test_a_graph_whose_config_states_the_head_size_is_quantized(tmp_path: Path) -> None:
    built = build_tiny_decoder(tmp_path / "fp32", SHAPE, config="genai")
    model = onnx.load(str(built))
    for value in [*model.graph.input, *model.graph.output]:
        if value.name.startswith(("past_key_values.", "present.")):
            value.type.tensor_type.shape.dim[3].dim_param = "head_size"  # as GenAI's builder
    onnx.save(model, built)

    report = quantize_weight_only(built, tmp_path / "int4" / "model.onnx")

    assert report.matmuls == 15
    assert load_decoder_io(tmp_path / "int4" / "model.onnx").cache.head_dim == 16
