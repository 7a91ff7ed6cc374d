"""A decoder's bundle carries the folder ONNX Runtime GenAI loads as it is: `genai/`."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from decoder_models import TinyShape, build_tiny_decoder, reference_greedy, tiny_weights

from optistudio.core.llm import greedy, open_decoder
from optistudio.core.llm.weight_only import WeightOnlyConfig, quantize_weight_only
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, verify_bundle, write_bundle
from optistudio.core.report.genai import NO_EOS, NO_TOKENIZER
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_model_file

SHAPE = TinyShape()
TOKENIZER = {"tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}'}
TOKENIZER |= {"tokenizer_config.json": '{"model_max_length": 128}'}


def _decoder_folder(folder: Path) -> Path:
    """The tiny decoder as Optimum leaves it: model.onnx, config.json and tokenizer files."""
    model = build_tiny_decoder(folder, SHAPE, config="hf")
    for name, text in TOKENIZER.items():
        (folder / name).write_text(text)
    return model


def _bundle(model: Path, out: Path) -> Path:
    source = BundleSource(
        name="tiny decoder", model_path=model, info=inspect_model(model), coreml_precisions=[]
    )
    return write_bundle(source, out).path


def _members(bundle: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(bundle) as z:
        return {name: z.read(name) for name in z.namelist() if name.startswith("genai/")}


def test_the_genai_folder_holds_the_graph_its_config_and_the_tokenizer(tmp_path: Path) -> None:
    model = _decoder_folder(tmp_path / "decoder")

    bundle = _bundle(model, tmp_path / "bundle.zip")

    members = _members(bundle)
    assert set(members) == {
        "genai/model.onnx",
        "genai/genai_config.json",
        "genai/config.json",
        "genai/tokenizer.json",
        "genai/tokenizer_config.json",
    }
    assert members["genai/model.onnx"] == model.read_bytes()
    assert members["genai/tokenizer.json"].decode() == TOKENIZER["tokenizer.json"]
    config = json.loads(members["genai/genai_config.json"])
    assert config["model"]["decoder"]["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert config["model"]["decoder"]["num_key_value_heads"] == SHAPE.kv_heads
    with zipfile.ZipFile(bundle) as z:
        pipeline = json.loads(z.read("pipeline.json"))
        manifest = json.loads(z.read("manifest.json"))
    assert pipeline["genai"]["config"] == "written from the model card"
    assert pipeline["genai"]["tokenizer"] == ["tokenizer.json", "tokenizer_config.json"]
    assert "genai" not in manifest["skipped"] and "genai_tokenizer" not in manifest["skipped"]
    assert manifest["skipped"]["genai_eos"] == NO_EOS  # the tiny config.json names no eos id
    assert verify_bundle(bundle) == []


def test_a_model_that_is_not_a_decoder_has_no_genai_folder(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = _bundle(tiny_model, tmp_path / "bundle.zip")

    with zipfile.ZipFile(bundle) as z:
        manifest = json.loads(z.read("manifest.json"))
        pipeline = json.loads(z.read("pipeline.json"))
    assert _members(bundle) == {}
    assert pipeline.get("genai") is None
    assert not {"genai", "genai_tokenizer", "genai_eos"} & set(manifest["skipped"])


def test_a_stored_decoder_gets_its_folder_and_the_missing_tokenizer_is_said(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    model = build_tiny_decoder(tmp_path / "decoder", SHAPE, config="hf")  # no tokenizer beside
    model_id = add_model_file(db_factory, app_settings, model, name="tiny decoder").model_id
    source = bundle_source(db_factory, app_settings, model_id)
    source.coreml_precisions = []

    report = write_bundle(source, tmp_path / "stored.zip")

    members = _members(report.path)
    assert {"genai/model.onnx", "genai/genai_config.json"} <= set(members)
    assert report.skipped["genai_tokenizer"] == NO_TOKENIZER
    config = json.loads(members["genai/genai_config.json"])
    assert config["model"]["decoder"]["head_size"] == SHAPE.head_dim


def _with_eos(model: Path, eos: int) -> None:
    config = json.loads((model.parent / "config.json").read_text())
    (model.parent / "config.json").write_text(json.dumps(config | {"eos_token_id": eos}))


@pytest.mark.extras
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_onnx_runtime_genai_loads_the_folder_and_decodes_our_tokens(
    tmp_path: Path, precision: str
) -> None:
    og = pytest.importorskip("onnxruntime_genai", reason="the genai extra is not installed")
    model = _decoder_folder(tmp_path / "fp32")
    if precision == "int4":
        quantized = tmp_path / "int4" / "model.onnx"
        quantize_weight_only(model, quantized, WeightOnlyConfig(bits=4, block_size=32))
        model = quantized
    prompt = np.array([5, 9, 17, 3, 40])
    ours = greedy(open_decoder(model), prompt[None], 10).tokens[0].tolist()
    _with_eos(model, min(set(range(SHAPE.vocab)) - set(ours)))  # GenAI stops there
    with zipfile.ZipFile(_bundle(model, tmp_path / "bundle.zip")) as z:
        z.extractall(tmp_path / "unzipped")

    genai_model = og.Model(str(tmp_path / "unzipped" / "genai"))
    params = og.GeneratorParams(genai_model)
    params.set_search_options(max_length=len(prompt) + 10, do_sample=False)
    generator = og.Generator(genai_model, params)
    generator.append_tokens(prompt[None].astype(np.int32))
    while not generator.is_done():
        generator.generate_next_token()

    assert [int(t) for t in generator.get_sequence(0)][len(prompt) :] == ours
    if precision == "fp32":
        assert ours == reference_greedy(tiny_weights(SHAPE), SHAPE, prompt, 10)
