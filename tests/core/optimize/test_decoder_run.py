"""The optimization run of a decoder: weight-only variants judged on text, timed as decoders,
and Auto's rule, on tiny decoders built in code (tests/decoder_models.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.llm.card import read_card
from optistudio.core.measure.compare import FASTER, SLOWER
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import TaskBudget
from optistudio.core.numerics.evaluators.text_generation import TEXT_GENERATION
from optistudio.core.optimize.decoder_run import choose_decoder, fitted
from optistudio.core.optimize.recipes import resolve_recipes
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, choose, optimize
from optistudio.core.optimize.spec import DecoderSettings
from optistudio.core.optimize.variant import VariantResult

QUICK = {"min_pairs": 3, "min_seconds": 0.05, "max_seconds": 0.6, "warmup_runs": 1}
SMALL = {"prompt_tokens": 8, "decode_steps": 4, "max_tokens": 512}
WEIGHT_ONLY = ["int4_weight_only", "int8_weight_only"]
HAS_NNCF = importlib.util.find_spec("nncf") is not None and importlib.util.find_spec("openvino")


def _spec(**fields: object) -> OptimizeSpec:
    decoder = SMALL | dict(fields.pop("decoder", {}))  # type: ignore[arg-type]
    return OptimizeSpec(comparison=QUICK, decoder=decoder, **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny decoder's folder: model.onnx and genai_config.json."""
    return build_tiny_decoder(tmp_path_factory.mktemp("decoder") / "tiny").parent


@pytest.fixture(scope="module")
def ids(folder: Path) -> Path:
    path = folder.parent / "ids.npy"
    np.save(path, np.random.default_rng(7).integers(0, TinyShape().vocab, 400))
    return path


@pytest.fixture(scope="module")
def report(folder: Path, ids: Path, tmp_path_factory: pytest.TempPathFactory) -> OptimizeReport:
    out = tmp_path_factory.mktemp("runs")
    return optimize(folder, _spec(recipes=WEIGHT_ONLY), out_dir=out, text=ids)


def _variant(report: OptimizeReport, name: str) -> VariantResult:
    return next(v for v in report.variants if v.recipe.name == name)


@pytest.mark.parametrize(
    ("target", "backends", "expected"),
    [
        ("any", ["onnxruntime"], WEIGHT_ONLY),
        ("onnxruntime", ["onnxruntime", "openvino"], WEIGHT_ONLY),
        ("any", ["onnxruntime", "openvino"], [*WEIGHT_ONLY, "int4_nncf@openvino"]),
        ("openvino", ["onnxruntime", "openvino"], ["int4_nncf"]),
    ],
    ids=["ort-only", "target-ort", "any-with-openvino", "target-openvino"],
)
def test_auto_offers_weight_only_candidates_for_a_decoder(
    folder: Path, target: str, backends: list[str], expected: list[str]
) -> None:
    if not HAS_NNCF and any("nncf" in name for name in expected):
        pytest.skip("NNCF's candidate needs openvino and nncf installed")
    info = inspect_model(folder / "model.onnx")

    found = resolve_recipes(["auto"], info, target_backend=target, backends=backends, decoder=True)

    assert [recipe.name for recipe in found] == expected


def test_each_variant_is_made_judged_on_the_text_and_timed(report: OptimizeReport) -> None:
    assert [v.status for v in report.variants] == ["made", "made"]
    assert report.task == "text_generation"
    assert report.task_budget == {"perplexity_increase": 0.05}
    assert report.data.startswith("token ids from ids.npy: 400 tokens")
    for variant in report.variants:
        metrics = variant.accuracy.task_metrics if variant.accuracy else {}
        increase = metrics["perplexity"] / metrics["reference_perplexity"] - 1
        assert metrics["perplexity_increase"] == pytest.approx(increase)
        assert 0 <= metrics["top1_agreement"] <= 1 and metrics["mean_kl"] >= 0
        assert variant.within_budget == (metrics["perplexity_increase"] <= 0.05)
        found = variant.decoding
        assert found is not None and found.pairs >= 2 and found.tokens_per_s > 0
        assert found.ttft_ms > 0 and found.original_ttft_ms > 0
        assert variant.ratio == found.decode.ratio and variant.verdict == found.decode.verdict
        assert variant.speedup == pytest.approx(1 / found.decode.ratio)


def test_the_same_text_judges_every_variant(report: OptimizeReport) -> None:
    references = {
        v.accuracy.task_metrics["reference_perplexity"] for v in report.variants if v.accuracy
    }

    assert len(references) == 1


def test_int4_weights_shrink_the_file_more_than_int8(report: OptimizeReport) -> None:
    int4, int8 = _variant(report, "int4_weight_only"), _variant(report, "int8_weight_only")
    assert int4.decoding and int8.decoding and int4.path

    assert int4.decoding.size_bytes < int8.decoding.size_bytes < int8.decoding.original_size_bytes
    assert int4.decoding.original_size_bytes == int8.decoding.original_size_bytes
    ops = {node.op_type for node in onnx.load(int4.path).graph.node}
    assert "MatMulNBits" in ops
    assert (Path(int4.path).parent / "genai_config.json").is_file()


def test_the_choice_is_the_one_the_stored_variants_give(report: OptimizeReport) -> None:
    best = choose(report.variants)

    assert report.chosen == (best.recipe.name if best else None)
    assert report.headline and any(note.startswith("Auto for decoders") for note in report.notes)


def test_a_variant_over_the_perplexity_budget_is_never_chosen(report: OptimizeReport) -> None:
    impossible = TaskBudget(TEXT_GENERATION, {"perplexity_increase": -1.0})
    fast = [
        v.model_copy(update={"verdict": FASTER, "ratio": 0.1, "within_budget": True})
        for v in report.variants
    ]

    chosen, note = choose_decoder(fast, impossible, "tokens_per_s")

    assert chosen is None
    assert note.count("over the -100% budget") == len(fast)


def _timed(variant: VariantResult, ratio: float, verdict: str, increase: float) -> VariantResult:
    """`variant` as if its paired ratio at batch 1 were `ratio` and its perplexity `increase`."""
    assert variant.decoding is not None and variant.accuracy is not None
    interval = variant.decoding.decode.model_copy(update={"ratio": ratio, "verdict": verdict})
    accuracy = variant.accuracy.model_copy(
        update={"task_metrics": variant.accuracy.task_metrics | {"perplexity_increase": increase}}
    )
    return variant.model_copy(
        update={
            "decoding": variant.decoding.model_copy(update={"decode": interval}),
            "accuracy": accuracy,
            "ratio": ratio,
            "ratio_high": ratio,
            "verdict": verdict,
            "within_budget": increase <= 0.05,
        }
    )


@pytest.mark.parametrize(
    ("int4", "int8", "chosen"),
    [
        ((0.4, FASTER, 0.01), (0.6, FASTER, 0.0), "int4_weight_only"),
        ((0.4, FASTER, 0.20), (0.6, FASTER, 0.0), "int8_weight_only"),
        ((0.4, FASTER, 0.20), (1.1, SLOWER, 0.0), None),
    ],
    ids=["fastest-in-budget", "fastest-over-budget", "none-faster-in-budget"],
)
def test_auto_picks_the_fastest_by_tokens_per_s_within_budget(
    report: OptimizeReport,
    int4: tuple[float, str, float],
    int8: tuple[float, str, float],
    chosen: str | None,
) -> None:
    variants = [
        _timed(_variant(report, "int4_weight_only"), *int4),
        _timed(_variant(report, "int8_weight_only"), *int8),
    ]
    budget = TaskBudget(TEXT_GENERATION, {"perplexity_increase": 0.05})

    picked, _ = choose_decoder(variants, budget, "tokens_per_s")

    assert picked == chosen
    best = choose(variants)  # the rule the worker applies to the stored variants agrees
    assert picked == (best.recipe.name if best else None)


def test_throughput_at_batch_n_is_timed_and_ranked_on_request(
    folder: Path, ids: Path, tmp_path: Path
) -> None:
    spec = _spec(recipes=["int8_weight_only"], decoder={"rank_by": "throughput", "batch": 3})

    (variant,) = optimize(folder, spec, out_dir=tmp_path, text=ids).variants

    found = variant.decoding
    assert found is not None and found.throughput is not None
    assert found.throughput_batch == 3 and (found.throughput_tokens_per_s or 0) > 0
    assert variant.ratio == found.throughput.ratio


def test_without_a_text_the_built_in_text_judges_and_says_so(folder: Path, tmp_path: Path) -> None:
    spec = _spec(recipes=["int8_weight_only"], decoder={"max_tokens": 256})

    found = optimize(folder, spec, out_dir=tmp_path)

    (variant,) = found.variants
    assert found.data.startswith("built-in text (Python's standard-library docstrings)")
    assert variant.builtin_samples == "judged" and variant.accuracy is not None
    assert variant.accuracy.data == "builtin"
    assert "judged on built-in samples, not your data" in variant.budget_note
    assert any(note.startswith("Built-in text, not your data") for note in found.notes)


def test_input_arrays_for_a_decoder_are_refused(folder: Path, ids: Path, tmp_path: Path) -> None:
    with pytest.raises(DataMismatch, match="judged on a text, not on input arrays"):
        optimize(folder, _spec(), out_dir=tmp_path, labels_file=ids)


def test_another_task_is_refused(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="judged in text_generation"):
        optimize(folder, _spec(task="classification"), out_dir=tmp_path)


def test_the_timing_and_windows_fit_the_context(folder: Path) -> None:
    card = read_card(folder / "model.onnx")  # context 128
    asked = DecoderSettings(prompt_tokens=512, decode_steps=200, window=1024)

    fit = fitted(asked, card)

    assert fit.window == 128 and fit.decode_steps == 64
    assert fit.prompt_tokens + fit.decode_steps < 128


@pytest.mark.skipif(not HAS_NNCF, reason="int4_nncf needs openvino and nncf installed")
def test_nncf_int4_is_judged_and_timed_on_openvino(tmp_path: Path) -> None:
    wide = TinyShape(hidden=128, ffn=256)  # NNCF's INT4 groups of 128 need K >= 128
    model = build_tiny_decoder(tmp_path / "wide", wide)
    np.save(tmp_path / "ids.npy", np.random.default_rng(1).integers(0, wide.vocab, 300))

    found = optimize(
        model, _spec(recipes=["int4_nncf"]), out_dir=tmp_path / "out", text=tmp_path / "ids.npy"
    )

    (variant,) = found.variants
    assert variant.status == "made", variant.error
    assert variant.backend == "openvino" and variant.path and variant.path.endswith(".xml")
    assert Path(variant.path).with_suffix(".bin").is_file()
    assert variant.accuracy is not None and variant.accuracy.candidate_backend == "openvino"
    assert variant.decoding is not None and variant.decoding.size_bytes > 0
