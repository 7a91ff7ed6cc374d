"""Precision recipes: BF16 / INT8 with the rest in BF16 / FP16 at OpenVINO's inference precision,
offered by Auto only where the device computes them, and the variant timed and labelled at it."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.backends import Availability, get_backend
from optistudio.core.backends.base import SessionOptions
from optistudio.core.machine.environment import isa_flags
from optistudio.core.machine.precisions import native_float, native_floats
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.samples import build_sample
from optistudio.core.optimize.applicability import (
    ONNXRUNTIME_NOTES,
    applicability,
    applicable_on,
    applicable_recipes,
)
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    auto_candidates,
    resolve_recipes,
)
from optistudio.core.optimize.run import (
    OptimizeSpec,
    VariantResult,
    made_earlier,
    optimize,
    run_precision,
)

QUICK = ComparisonSpec(min_pairs=20, min_seconds=0.2, max_seconds=3.0, threads=1)
AVX2 = ["sse4_2", "fma", "f16c", "avx", "avx2"]
AVX512 = [*AVX2, "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]
ZEN4 = [*AVX512, "avx512_bf16"]
SAPPHIRE_RAPIDS = [*ZEN4, "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"]
GRANITE_RAPIDS = [*SAPPHIRE_RAPIDS, "amx_fp16"]
BOTH = ["onnxruntime", "openvino"]
BF16_NAMES = {"bf16", "int8_nncf_bf16", "int8_nncf_transformer_bf16"}
OV_UP = Availability(ok=True, devices=["cpu"])


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    return build_sample("tiny_cnn", tmp_path)


def _names(recipes: list) -> set[str]:
    return {recipe.name for recipe in recipes}


def _openvino_bf16() -> str | None:
    """Why this machine cannot run a real BF16 variant on OpenVINO; None when it can."""
    if not native_float("bf16").native:
        return f"BF16 recipes need AVX512-BF16 or AMX-BF16: {native_float('bf16').reason}"
    availability = get_backend("openvino").availability()
    if not availability.ok:
        return f"openvino cannot run here: {availability.reason}"
    return None


@pytest.mark.parametrize(
    ("flags", "bf16", "fp16"),
    [
        (AVX2, False, False),
        (AVX512, False, False),
        (ZEN4, True, False),
        (SAPPHIRE_RAPIDS, True, True),
        (GRANITE_RAPIDS, True, True),
        (["amx_fp16"], False, True),
    ],
    ids=["avx2", "avx512-no-bf16", "avx512-bf16", "amx-bf16", "amx-fp16", "amx-fp16-alone"],
)
def test_openvino_auto_times_bf16_and_fp16_only_where_the_cpu_computes_them(
    cnn: Path, tiny_model: Path, flags: list[str], bf16: bool, fp16: bool
) -> None:
    on_cnn = _names(auto_candidates(inspect_model(cnn), target_backend="openvino", flags=flags))
    on_mlp = _names(
        auto_candidates(inspect_model(tiny_model), target_backend="openvino", flags=flags)
    )

    assert ({"bf16", "int8_nncf_bf16"} <= on_cnn) is bf16
    assert ({"bf16", "int8_nncf_transformer_bf16"} <= on_mlp) is bf16
    assert bool(BF16_NAMES & (on_cnn | on_mlp)) is bf16
    assert ("fp16_inference" in on_cnn) is fp16
    assert "int8_nncf" in on_cnn and "int8_nncf_transformer" in on_mlp  # FP32 rest still timed
    assert "fp16" not in on_cnn  # on OpenVINO FP16 is its inference precision, not a graph pass


@pytest.mark.parametrize(
    ("flags", "precisions"),
    [
        (AVX2, []),
        (AVX512, []),
        (ZEN4, ["bf16", "bf16", "bf16"]),  # bf16, NNCF's INT8 IR and ONNX QDQ in bf16
        (SAPPHIRE_RAPIDS, ["bf16", "bf16", "bf16", "fp16"]),
    ],
    ids=["avx2", "avx512-no-bf16", "avx512-bf16", "amx"],
)
def test_any_target_pins_the_precision_recipes_to_openvino(
    cnn: Path, flags: list[str], precisions: list[str]
) -> None:
    info = inspect_model(cnn)

    spread = resolve_recipes(["auto"], info, target_backend="any", backends=BOTH, flags=flags)
    only_ort = resolve_recipes(["auto"], info, target_backend="any", flags=flags)

    pinned = [r for r in spread if r.precision is not None]
    assert sorted(r.precision for r in pinned) == precisions
    assert {r.backend for r in pinned} <= {"openvino"}
    bf16 = {"bf16@openvino", "int8_nncf_bf16@openvino", "int8_nncf_ov_bf16@openvino"}
    assert (bf16 <= _names(spread)) is bool(precisions)
    assert not [r for r in only_ort if r.precision]  # no OpenVINO here: no BF16 candidate


def test_a_gpu_gets_fp16_inference_and_no_bf16(cnn: Path) -> None:
    names = _names(
        auto_candidates(inspect_model(cnn), target_backend="openvino", flags=ZEN4, device="gpu")
    )

    assert "fp16_inference" in names
    assert not BF16_NAMES & names


def test_onnxruntime_keeps_its_fp16_rule_and_has_no_bf16_recipe(cnn: Path) -> None:
    info = inspect_model(cnn)

    with_fp16 = _names(auto_candidates(info, flags=SAPPHIRE_RAPIDS))
    without = _names(auto_candidates(info, flags=ZEN4))

    assert "fp16" in with_fp16 and "fp16" not in without
    assert not BF16_NAMES & (with_fp16 | without)
    assert {note.precision for note in ONNXRUNTIME_NOTES} == {"bf16", "int8+bf16"}


def test_a_named_precision_recipe_under_any_goes_to_openvino(cnn: Path) -> None:
    [bf16] = resolve_recipes(["bf16"], inspect_model(cnn), target_backend="any", backends=BOTH)

    assert (bf16.name, bf16.backend, bf16.precision) == ("bf16@openvino", "openvino", "bf16")


@pytest.mark.parametrize(
    ("flags", "recipe", "says"),
    [
        (AVX2, "bf16", "bf16 needs a CPU with AVX512-BF16 or AMX-BF16; this CPU has no AVX512"),
        (AVX512, "int8_nncf_bf16", "needs a CPU with AVX512-BF16 or AMX-BF16"),
        (ZEN4, "fp16_inference", "needs a CPU with AVX512-FP16 or AMX-FP16, or a GPU"),
        (ZEN4, "fp16", "fp16 pays off only on a CPU with AVX512-FP16 or AMX-FP16"),
        ([], "bf16", "flags could not be read"),
    ],
    ids=["avx2-bf16", "avx512-int8-bf16", "zen4-fp16-inference", "zen4-ort-fp16", "no-flags"],
)
def test_a_precision_recipe_that_does_not_apply_says_why(
    flags: list[str], recipe: str, says: str
) -> None:
    found = applicability(BUILTIN_RECIPES[recipe], {"openvino": OV_UP}, flags=flags)

    assert not found.applies
    assert says in (found.why_not or "")


def test_precision_recipes_apply_where_the_cpu_computes_them_and_openvino_runs() -> None:
    up = applicable_recipes(flags=GRANITE_RAPIDS, backends={"openvino": OV_UP})
    down = applicable_recipes(
        flags=GRANITE_RAPIDS,
        backends={"openvino": Availability(ok=False, reason="openvino is not installed")},
    )

    assert all(up[name].applies for name in (*BF16_NAMES, "fp16_inference", "fp16"))
    assert up["bf16"].computes == "bf16" and up["int8_static"].computes is None
    assert not down["bf16"].applies
    assert down["bf16"].why_not == (
        "It runs on openvino, which cannot run here: openvino is not installed."
    )
    assert down["int8_static"].applies  # ONNX Runtime's recipes do not need OpenVINO


def test_a_workers_inventory_says_which_recipes_apply_there() -> None:
    inventory = {
        "backends": {"openvino": {"available": True, "reason": "", "devices": ["cpu"]}},
        "cpu": {"isa_flags": AVX2},
    }

    found = applicable_on(inventory)

    assert not found["bf16"].applies and "AVX512-BF16" in (found["bf16"].why_not or "")
    assert found["int8_nncf"].applies


def test_native_floats_follow_the_flags() -> None:
    floats = native_floats(SAPPHIRE_RAPIDS)

    assert floats["bf16"].native and floats["bf16"].flags == ["avx512_bf16", "amx_bf16"]
    assert floats["fp16"].native and floats["fp16"].flags == ["avx512_fp16"]
    assert not native_floats(AVX512)["bf16"].native
    assert native_floats(AVX2)["fp16"].reason == "this CPU has no AVX512-FP16 or AMX-FP16"


@pytest.mark.parametrize(
    ("produced", "runtime", "label"),
    [("fp32", None, "fp32"), ("fp32", "bf16", "bf16"), ("int8", "bf16", "int8+bf16")],
)
def test_the_variants_precision_names_the_inference_precision(
    produced: str, runtime: str | None, label: str
) -> None:
    assert run_precision(produced, runtime) == label


def test_a_recipe_differing_only_in_precision_reuses_the_earlier_file() -> None:
    nncf = VariantResult(
        recipe=BUILTIN_RECIPES["int8_nncf"], precision="int8", backend="openvino", path="m.onnx"
    )
    other_backend = nncf.model_copy(update={"backend": "onnxruntime"})
    with_bf16 = BUILTIN_RECIPES["int8_nncf_bf16"]

    assert made_earlier(with_bf16, "openvino", [nncf]) is nncf
    assert made_earlier(with_bf16, "openvino", [other_backend]) is None
    assert made_earlier(BUILTIN_RECIPES["int8_nncf_transformer_bf16"], "openvino", [nncf]) is None
    assert made_earlier(BUILTIN_RECIPES["bf16"], "openvino", [nncf]) is None  # no passes


def test_a_variant_stored_before_recipes_had_a_precision_still_loads() -> None:
    stored = {
        "recipe": {"name": "fp32@openvino", "label": "FP32", "steps": [], "backend": "openvino"},
        "precision": "fp32",
        "backend": "openvino",
        "accuracy": {
            "samples": 4,
            "data": "synthetic",
            "max_abs_error": 0.0,
            "mean_abs_error": 0.0,
            "mean_cosine": 1.0,
            "min_cosine": 1.0,
            "per_output_max_abs_error": {"y": 0.0},
            "nan_or_inf": False,
        },
    }

    variant = VariantResult.model_validate(stored)

    assert variant.recipe.precision is None
    assert variant.accuracy and variant.accuracy.candidate_precision == "fp32"


def test_bf16_on_openvino_is_judged_and_timed_at_bf16(cnn: Path, tmp_path: Path) -> None:
    why = _openvino_bf16()
    if why:
        pytest.skip(why)
    spec = OptimizeSpec(
        recipes=["bf16", "int8_nncf", "int8_nncf_bf16"], comparison=QUICK, accuracy_samples=8
    )

    report = optimize(cnn, spec, out_dir=tmp_path / "out")

    by_name = {v.recipe.name: v for v in report.variants}
    bf16, nncf, mixed = (
        by_name[name] for name in ("bf16@openvino", "int8_nncf@openvino", "int8_nncf_bf16@openvino")
    )
    assert [v.error for v in report.variants] == [None, None, None]
    assert (bf16.precision, bf16.backend) == ("bf16", "openvino")
    assert bf16.accuracy.candidate_precision == "bf16"
    assert 0.999 < bf16.accuracy.mean_cosine < 1.0  # bf16 rounds: not the FP32 outputs
    assert bf16.ratio_low <= bf16.ratio <= bf16.ratio_high
    assert (nncf.precision, mixed.precision) == ("int8", "int8+bf16")
    assert mixed.path == nncf.path  # quantized once, timed at both precisions
    assert mixed.steps[-1].details["file_of"] == "int8_nncf@openvino"
    loaded = get_backend("openvino").load(Path(bf16.path), SessionOptions(precision="bf16"))
    loaded.close()
    assert loaded.details["inference_precision"] == "bf16"


def test_bf16_where_the_cpu_lacks_it_is_one_failed_variant_saying_why(
    cnn: Path, tmp_path: Path
) -> None:
    if native_float("bf16").native:
        pytest.skip(f"{native_float('bf16').reason}: OpenVINO runs BF16 here")
    availability = get_backend("openvino").availability()
    if not availability.ok:
        pytest.skip("openvino cannot run here")
    if "bf16" in availability.precisions.get("cpu", []):  # AVX-NE-CONVERT CPUs: converts only
        pytest.skip("OpenVINO offers bf16 on this CPU without AVX512-BF16 or AMX-BF16")
    spec = OptimizeSpec(recipes=["bf16"], comparison=QUICK, accuracy_samples=4)

    [variant] = optimize(cnn, spec, out_dir=tmp_path / "out").variants

    assert variant.status == "failed" and variant.precision == "bf16"
    assert variant.error and "bf16" in variant.error.message
    assert "AVX-512 BF16 or AMX" in (variant.error.hint or "")


def test_this_machines_auto_follows_its_flags(cnn: Path) -> None:
    names = _names(
        resolve_recipes(["auto"], inspect_model(cnn), target_backend="any", backends=BOTH)
    )

    assert ("bf16@openvino" in names) is bool({"avx512_bf16", "amx_bf16"} & set(isa_flags()))
