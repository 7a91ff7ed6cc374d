"""The optimization run end to end on tiny models: variants, accuracy, timing, the choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.errors import ErrorCode, ErrorInfo, UnknownName
from optistudio.core.machine.environment import int8_choice
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.samples import build_sample
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    auto_candidates,
    int8_notes,
    resolve_recipes,
)
from optistudio.core.optimize.run import (
    OptimizeSpec,
    VariantResult,
    choose,
    optimize,
    with_settings,
)
from optistudio.core.passes.base import PassReport

QUICK = ComparisonSpec(min_pairs=20, min_seconds=0.2, max_seconds=3.0, threads=1)


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    return build_sample("tiny_cnn", tmp_path)


def test_graph_recipe_makes_a_checked_and_timed_variant(tiny_model: Path, tmp_path: Path) -> None:
    spec = OptimizeSpec(recipes=["graph"], comparison=QUICK, accuracy_samples=4)

    report = optimize(tiny_model, spec, out_dir=tmp_path / "out")

    [variant] = report.variants
    assert variant.error is None
    assert Path(variant.path).exists()
    assert [s.step for s in variant.steps] == ["simplify", "ort_optimize"]
    assert variant.accuracy.mean_cosine == pytest.approx(1.0, abs=1e-5)
    assert variant.within_budget
    assert variant.ratio_low <= variant.ratio <= variant.ratio_high
    assert variant.speedup == pytest.approx(1 / variant.ratio)
    assert "synthetic" in report.data.lower()


def test_a_failing_recipe_is_recorded_and_the_others_complete(tiny_model, tmp_path, monkeypatch):
    from optistudio.core.errors import PassFailed
    from optistudio.core.passes import graph

    def broken(*args, **kwargs):
        raise PassFailed("onnxslim could not simplify this model: boom")

    monkeypatch.setattr(graph, "run_simplify", broken)
    monkeypatch.setitem(
        BUILTIN_RECIPES,
        "just_ort",
        BUILTIN_RECIPES["graph"].model_copy(
            update={"name": "just_ort", "steps": BUILTIN_RECIPES["graph"].steps[1:]}
        ),
    )
    spec = OptimizeSpec(recipes=["graph", "just_ort"], comparison=QUICK, accuracy_samples=2)

    report = optimize(tiny_model, spec, out_dir=tmp_path / "out")

    failed, made = report.variants
    assert failed.status == "failed" and failed.path is None
    assert failed.error == ErrorInfo(
        code=ErrorCode.pass_failed, message="onnxslim could not simplify this model: boom"
    )
    assert made.status == "made" and made.error is None and made.path
    assert report.made == [made] and report.failed == [failed]


def test_a_bug_in_a_recipe_still_raises(tiny_model, tmp_path, monkeypatch):
    from optistudio.core.passes import graph

    def buggy(*args, **kwargs):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(graph, "run_simplify", buggy)
    spec = OptimizeSpec(recipes=["graph"], comparison=QUICK, accuracy_samples=2)

    with pytest.raises(KeyError, match="a bug of ours"):
        optimize(tiny_model, spec, out_dir=tmp_path / "out")


def test_a_variant_file_the_checks_refuse_is_the_recipes_failure(tiny_model, tmp_path, monkeypatch):
    from optistudio.core.passes import graph

    def writes_garbage(model, out, config, context):
        out.write_bytes(b"not a model")
        return PassReport(output=out)

    monkeypatch.setattr(graph, "run_ort_optimize", writes_garbage)
    spec = OptimizeSpec(recipes=["graph"], comparison=QUICK, accuracy_samples=2)

    [variant] = optimize(tiny_model, spec, out_dir=tmp_path / "out").variants

    assert variant.status == "failed" and variant.error.code == ErrorCode.pass_failed
    assert variant.error.message.startswith("The Graph optimization recipe made a model")
    assert "not your model" in variant.error.hint and "export" not in variant.error.hint.lower()


def test_a_result_stored_before_statuses_reads_its_error_text_as_a_failure() -> None:
    stored = {"recipe": BUILTIN_RECIPES["graph"].model_dump(), "precision": "fp32"}

    failed = VariantResult.model_validate(stored | {"error": "boom. Try X."})
    made = VariantResult.model_validate(stored | {"error": None})

    assert failed.status == "failed"
    assert failed.error == ErrorInfo(code=ErrorCode.failed, message="boom. Try X.")
    assert made.status == "made" and made.error is None


def test_auto_picks_cnn_and_transformer_candidates(cnn: Path, tiny_model: Path) -> None:
    cnn_names = [r.name for r in auto_candidates(inspect_model(cnn))]
    mlp_names = [r.name for r in auto_candidates(inspect_model(tiny_model))]

    assert "int8_static" in cnn_names and "int8_dynamic" not in cnn_names
    assert "int8_dynamic" in mlp_names and "int8_static" not in mlp_names


def test_unknown_recipe_lists_the_valid_ones(tiny_model: Path) -> None:
    with pytest.raises(UnknownName, match="Valid recipes: auto, fp32, graph"):
        resolve_recipes(["turbo"], inspect_model(tiny_model))


def _variant(name: str, ratio: float, high: float, verdict: str, ok: bool) -> VariantResult:
    return VariantResult(
        recipe=BUILTIN_RECIPES[name],
        precision="int8",
        ratio=ratio,
        ratio_low=ratio - 0.01,
        ratio_high=high,
        verdict=verdict,
        within_budget=ok,
    )


def test_choice_is_the_fastest_significant_variant_within_budget() -> None:
    variants = [
        _variant("int8_dynamic", 0.30, 0.32, "faster", ok=False),  # fastest, but over budget
        _variant("int8_static", 0.50, 0.52, "faster", ok=True),
        _variant("graph", 0.45, 1.01, "no significant difference", ok=True),
        _variant("fusion", 0.60, 0.62, "faster", ok=True),
    ]

    assert choose(variants).recipe.name == "int8_static"
    assert choose([variants[0], variants[2]]) is None


def test_a_variant_calibrated_on_random_inputs_is_chosen_only_in_a_speed_only_run() -> None:
    random = _variant("int8_static", 0.50, 0.52, "faster", ok=True)
    random.calibrated_on_random = True
    fused = _variant("fusion", 0.60, 0.62, "faster", ok=True)

    assert choose([random, fused]).recipe.name == "fusion"
    assert choose([random, fused], speed_only=True).recipe.name == "int8_static"


def test_pass_settings_reach_the_steps_and_are_recorded(cnn: Path, tmp_path: Path) -> None:
    spec = OptimizeSpec(
        recipes=["fusion"],
        comparison=QUICK,
        accuracy_samples=2,
        pass_settings={"fusion": {"patterns": ["conv_relu"]}},
    )

    [variant] = optimize(cnn, spec, out_dir=tmp_path / "out").variants

    fusion_step = variant.recipe.steps[-1]
    assert fusion_step.config == {"patterns": ["conv_relu"]}
    assert variant.steps[-1].details["matches"] == {"conv_relu": 2}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fusion": {"patterns": "conv_relu", "colour": 1}}, "colour"),
        ({"turbo": {}}, "Unknown pass 'turbo'"),
    ],
    ids=["bad-field", "unknown-pass"],
)
def test_bad_pass_settings_name_the_problem(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        OptimizeSpec(pass_settings=settings)


def test_openvino_target_gets_nncf_and_is_timed_on_openvino(cnn: Path, tmp_path: Path) -> None:
    from optistudio.core.backends import get_backend

    if not get_backend("openvino").availability().ok:
        pytest.skip("openvino is not available here")
    spec = OptimizeSpec(
        recipes=["int8_nncf"], target_backend="openvino", comparison=QUICK, accuracy_samples=8
    )

    [variant] = optimize(cnn, spec, out_dir=tmp_path / "out").variants

    assert variant.error is None, variant.error
    assert variant.precision == "int8"
    assert variant.accuracy.mean_cosine > 0.98
    assert variant.ratio_low <= variant.ratio <= variant.ratio_high
    assert [
        r.name for r in resolve_recipes(["auto"], inspect_model(cnn), target_backend="openvino")
    ].count("int8_nncf") == 1


def test_any_backend_auto_spreads_candidates_over_the_backends(cnn: Path, tiny_model) -> None:
    cnn_names = [
        r.name
        for r in resolve_recipes(
            ["auto"], inspect_model(cnn), target_backend="any", backends=["onnxruntime", "openvino"]
        )
    ]
    assert "int8_static" in cnn_names
    assert {"fp32@openvino", "int8_nncf@openvino"} <= set(cnn_names)
    assert "int8_dynamic@openvino" not in cnn_names
    mlp = resolve_recipes(
        ["auto"],
        inspect_model(tiny_model),
        target_backend="any",
        backends=["onnxruntime", "openvino"],
    )
    assert {"int8_dynamic", "int8_nncf_transformer@openvino"} <= {r.name for r in mlp}
    assert {r.backend for r in mlp} == {"onnxruntime", "openvino"}
    only_ort = resolve_recipes(["auto"], inspect_model(cnn), target_backend="any")
    assert {r.backend for r in only_ort} == {"onnxruntime"}


def test_a_named_recipe_under_any_goes_to_the_backend_it_is_for(cnn: Path) -> None:
    info = inspect_model(cnn)
    both = ["onnxruntime", "openvino"]
    [nncf] = resolve_recipes(["int8_nncf"], info, target_backend="any", backends=both)
    assert nncf.name == "int8_nncf@openvino" and nncf.backend == "openvino"
    with pytest.raises(UnknownName, match="needs openvino, which is not available"):
        resolve_recipes(["int8_nncf"], info, target_backend="any", backends=["onnxruntime"])


def test_an_unknown_target_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="Or 'any'"):
        OptimizeSpec(target_backend="tpu")


def test_any_target_times_openvino_variants_against_the_original_on_onnxruntime(
    cnn: Path, tmp_path: Path
) -> None:
    from optistudio.core.backends import get_backend

    if not get_backend("openvino").availability().ok:
        pytest.skip("openvino is not available here")
    spec = OptimizeSpec(recipes=["fp32"], comparison=QUICK, accuracy_samples=8)
    spec_ov = OptimizeSpec(recipes=["int8_nncf"], comparison=QUICK, accuracy_samples=8)
    assert spec.target_backend == "any"

    [as_is] = optimize(cnn, spec, out_dir=tmp_path / "a").variants
    [nncf] = optimize(cnn, spec_ov, out_dir=tmp_path / "b").variants

    assert as_is.backend == "onnxruntime" and as_is.accuracy.max_abs_error == 0.0
    assert nncf.error is None, nncf.error
    assert nncf.backend == "openvino" and nncf.accuracy.candidate_backend == "openvino"
    assert nncf.accuracy.mean_cosine > 0.98 and nncf.ratio is not None
    warned = [w for step in nncf.steps for w in step.warnings]
    assert not any("ONNX Runtime may run this model slower" in w for w in warned)  # it runs on OV


def _elementwise(path: Path) -> Path:
    """Exp -> Neg, nodes unnamed: nothing static INT8 quantizes."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["avx", "avx2"], "INT8 weights 7-bit (reduce_range): this x86 CPU has no VNNI/AMX"),
        (["avx2", "avx512f", "avx512_vnni"], "INT8 weights 8-bit: this CPU has AVX512-VNNI"),
        (["avx2", "amx_int8"], "INT8 weights 8-bit: this CPU has AMX-INT8"),
    ],
    ids=["avx2", "vnni", "amx"],
)
def test_int8_notes_say_what_was_chosen_for_the_cpu_and_why(flags: list[str], says: str) -> None:
    recipes = [BUILTIN_RECIPES[name] for name in ("graph", "int8_dynamic", "int8_static")]

    [note] = int8_notes(recipes, flags)

    assert note.startswith(says)
    assert "int8_dynamic, int8_static" in note and "graph" not in note


def test_no_int8_note_without_an_int8_pass_or_when_the_range_was_given() -> None:
    given = with_settings(BUILTIN_RECIPES["int8_static"], {"int8_static": {"reduce_range": False}})

    assert int8_notes([BUILTIN_RECIPES["graph"], BUILTIN_RECIPES["int8_nncf"]], ["avx2"]) == []
    assert int8_notes([given], ["avx2"]) == []


def test_an_int8_run_says_what_it_chose_on_this_cpu(tiny_model: Path, tmp_path: Path) -> None:
    spec = OptimizeSpec(recipes=["int8_dynamic"], comparison=QUICK, accuracy_samples=2)

    report = optimize(tiny_model, spec, out_dir=tmp_path / "out")

    choice = int8_choice()
    assert report.notes == int8_notes([variant.recipe for variant in report.variants])
    assert report.notes[0].startswith(choice.sentence())
    [variant] = report.variants
    assert variant.steps[-1].details["reduce_range"] == f"{choice.weights} weights: {choice.reason}"


def test_static_int8_with_nothing_to_quantize_is_one_failed_variant(tmp_path: Path) -> None:
    model = _elementwise(tmp_path / "elementwise.onnx")
    spec = OptimizeSpec(recipes=["graph", "int8_static"], comparison=QUICK, accuracy_samples=2)

    report = optimize(model, spec, out_dir=tmp_path / "out")

    made, failed = report.variants
    assert made.status == "made"
    assert failed.status == "failed" and failed.error.code == ErrorCode.pass_failed
    assert failed.error.message.startswith("Static INT8 has nothing to quantize in this model")


def test_int8_calibrates_on_its_own_inputs_when_given_and_is_judged_on_the_data(
    cnn: Path, tmp_path: Path
) -> None:
    from optistudio.core.data.datasets import SyntheticDataset

    inputs = inspect_model(cnn).inputs
    data = SyntheticDataset(inputs, samples=8, seed=1)
    calibration = SyntheticDataset(inputs, samples=24, seed=2)
    spec = OptimizeSpec(recipes=["int8_static"], comparison=QUICK)

    [variant] = optimize(
        cnn, spec, out_dir=tmp_path / "out", data=data, calibration=calibration
    ).variants

    assert variant.status == "made"
    assert variant.steps[-1].details["calibration"]["source"] == calibration.description
    assert calibration.description != data.description
    assert variant.accuracy is not None and variant.accuracy.samples == 8
