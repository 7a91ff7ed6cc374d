"""Models: upload or pick a sample, read the model card, start a benchmark."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import streamlit as st

from optistudio.core.data.input_profile import InputProfile
from optistudio.core.errors import ErrorInfo, OptistudioError
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.samples import list_samples
from optistudio.core.report.symbolic_dims import SymbolicDims
from optistudio.services.catalog import add_from_storage, add_sample, add_upload
from optistudio.services.input_profiles import load_profile, save_profile
from optistudio.services.jobkinds import BENCHMARK
from optistudio.studio import cached, charts, deletion_services, pages, state, submitting
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import human_bytes, human_count, prose
from optistudio.studio.input_profile_services import (
    BatchNote,
    batch_axis_choices,
    batch_note,
    cut_shapes,
    profile_flops,
    profile_from_rows,
    profile_rows,
    symbolic_legend,
    tensor_table,
)
from optistudio.studio.jobs_services import BadSetting, Refused
from optistudio.studio.model_batch import dynamic_batch_offer
from optistudio.studio.model_free_dims import free_dims_offer
from optistudio.studio.model_picker import name_label, pick_model
from optistudio.studio.model_services import model_file
from optistudio.studio.model_storage_services import storage_offer
from optistudio.studio.model_task import task_section
from optistudio.studio.views import model_decoder

HELP = {name: field.description for name, field in BenchmarkSpec.model_fields.items()}
FLOPS_WARNINGS = ("the FLOPs estimate sets every dynamic dim to 1", "FLOPs could not be estimated")
"""Intake's warnings about its FLOPs estimate, dropped once they are counted at the profile."""
AT_PROFILE = "at the input profile's shapes"
DEFAULTS = BenchmarkSpec()
CONFIRM_KEY = "confirm-delete-model"
DELETED_KEY = "deleted-model-note"


def render() -> None:
    st.title("Models")
    if said := st.session_state.pop(DELETED_KEY, None):
        st.success(said)
    add_col, sample_col = st.columns([3, 2])
    with add_col:
        upload_section()
        storage_section()
    with sample_col:
        sample_section()
    chosen = choose_model()
    if chosen is None:
        st.info("No models yet. Upload an `.onnx` file above, or add a sample model.")
        return
    info = ModelInfo.model_validate(chosen["info"])
    profile = load_profile(state.session_factory(), chosen["id"])  # read once per rerun
    targets = state.live_targets(info)
    decoder = model_decoder.card_of(chosen)
    model_card(chosen, info, profile, decoder=decoder is not None)
    stored_section(chosen)
    if decoder is not None:  # a language model's own figures; fed by its decode loop
        targets = model_decoder.decoder_targets(targets)
        model_decoder.decoder_card(decoder, chosen["id"])
    task_section(chosen)
    if decoder is not None:
        st.subheader("Input profile")
        st.info(model_decoder.NOT_PROFILED)
    else:
        input_profile_section(chosen, info, profile)
    benchmark_form(chosen, info, profile, targets, decoder=decoder is not None)
    every_target(chosen, targets)


def upload_section() -> None:
    upload = st.file_uploader(
        "Upload an ONNX model",
        type=["onnx", "zip"],
        help="An .onnx file, or a .zip of a model's folder: a decoder with its "
        "genai_config.json / config.json and tokenizer files, or a graph with its external data.",
        key="upload",
        max_upload_size=state.settings().max_upload_mb,  # the limit intake enforces, not 1 GB
    )
    if upload is None:
        return
    done: dict[str, str | ErrorInfo] = st.session_state.setdefault("uploads_done", {})
    if upload.file_id not in done:
        with st.spinner(f"Validating {upload.name}…"):
            done[upload.file_id] = ingest(
                lambda: add_upload(
                    state.session_factory(), state.settings(), upload, filename=upload.name
                )
            )
    show_outcome(done[upload.file_id])


def storage_section() -> None:
    """A model already on the workers' shared storage (only when the operator set roots)."""
    offer = storage_offer(state.settings())
    if offer is None:
        return
    with st.expander("Add from shared storage"):
        st.caption(offer.caption())
        path = st.selectbox(
            "Model path",
            offer.paths,
            index=None,
            accept_new_options=True,
            placeholder="pick a model, or type its path",
            key="storage-path",
        )
        if st.button("Add from storage", disabled=not path):
            with st.spinner(f"Checking {path}…"):
                outcome = ingest(
                    lambda: add_from_storage(state.session_factory(), state.settings(), str(path))
                )
            show_outcome(outcome)


def sample_section() -> None:
    samples = {s.name: s for s in list_samples()}
    name = st.selectbox(
        "…or pick a sample model",
        list(samples),
        format_func=lambda n: samples[n].label,
        help="Samples are built in code (or copied from an installed package).",
    )
    if name:
        st.caption(samples[name].description)
    if st.button("Add sample", disabled=not name):
        outcome = ingest(lambda: add_sample(state.session_factory(), state.settings(), name))
        show_outcome(outcome)


def ingest(store: Any) -> str | ErrorInfo:
    """Run a store call; returns 'ok:<id>:<created>', or the error that refused the model."""
    try:
        entry = store()
    except OptistudioError as exc:
        return exc.info()
    st.query_params["model"] = str(entry.model_id)
    return f"ok:{entry.model_id}:{int(entry.created)}"


def show_outcome(outcome: str | ErrorInfo) -> None:
    if isinstance(outcome, ErrorInfo):
        show_error(outcome, prefix="Model refused: ")
        return
    model_id, _, created = outcome.removeprefix("ok:").partition(":")
    if created == "1":
        st.success(f"Stored as model #{model_id}.")
    else:
        st.info(f"This file is already stored as model #{model_id} (same SHA-256).")


def choose_model() -> dict[str, Any] | None:
    """The model whose card the page shows (with its digest's start), None with none stored."""
    choices = cached.model_choices()
    return pick_model(choices, label=digest_label) if choices else None


def digest_label(choice: dict[str, Any]) -> str:
    return f"{name_label(choice)} ({choice['sha256'][:10]})"


def model_card(
    chosen: dict[str, Any], info: ModelInfo, profile: InputProfile, *, decoder: bool = False
) -> None:
    st.subheader(f"Model card · {chosen['name']}")
    cols = st.columns(5)
    cols[0].metric("File size", human_bytes(info.size_bytes))
    cols[1].metric("Parameters", human_count(info.parameter_count))
    flops, at = card_flops(chosen, info, profile)
    at_profile = flops is not None and at.startswith(AT_PROFILE)
    cols[2].metric(
        "FLOPs (one sample)",
        human_count(flops),
        help=f"2 x multiply-adds of Conv/MatMul/Gemm for one sample, {at}.",
    )
    cols[3].metric("Opset", info.opset)
    cols[4].metric("Nodes", info.node_count)
    st.caption(f"SHA-256 `{info.sha256}` · IR {info.ir_version} · producer {info.producer or '—'}")
    if info.quantized_note:  # an INT8 file as uploaded: its precision is not fp32
        st.info(
            f"This file is {info.quantized_note}: it holds quantization ops as uploaded, so it "
            "is no FP32 original, and its variants are judged against this quantized file."
        )
    dims = SymbolicDims()
    left, right = st.columns(2)
    with left:
        st.markdown("**Inputs**")
        st.dataframe(tensor_table(info.inputs, dims), hide_index=True, width="stretch")
        st.markdown("**Outputs**")
        st.dataframe(tensor_table(info.outputs, dims), hide_index=True, width="stretch")
        if dims.placeholders:
            with st.expander(f"Symbolic dims in full ({len(dims.placeholders)})"):
                st.caption("Shape inference names these dims by the expression that sizes them.")
                st.dataframe(symbolic_legend(dims), hide_index=True, width="stretch")
                cut = cut_shapes([*info.inputs, *info.outputs], dims)
                if not cut.empty:
                    st.dataframe(cut, hide_index=True, width="stretch")
    with right:
        st.markdown("**Operators**")
        st.plotly_chart(charts.op_histogram(info.op_histogram), width="stretch")
    for warning in model_decoder.card_warnings(info.warnings) if decoder else info.warnings:
        if not (at_profile and warning.startswith(FLOPS_WARNINGS)):
            st.warning(prose(warning))


def stored_section(chosen: dict[str, Any]) -> None:
    """What the model occupies on disk, and deleting it (with its variants, results, jobs and
    files) after a confirmation that says what goes and what it frees."""
    factory, settings = state.session_factory(), state.settings()
    plan = deletion_services.model_plan(factory, settings, model_id=chosen["id"])
    if isinstance(plan, ErrorInfo):
        return
    left, right = st.columns([5, 1])
    left.caption(deletion_services.disk_use(plan) + f" Deleting it frees {plan.freed()}.")
    if right.button("Delete model…", key=f"delete-model-{chosen['id']}"):
        st.session_state[CONFIRM_KEY] = chosen["id"]
    if st.session_state.get(CONFIRM_KEY) != chosen["id"]:
        return
    if refusal := plan.refusal():  # a job on it still queued or running
        st.session_state.pop(CONFIRM_KEY, None)
        show_error(refusal.info(), prefix="Not deleted: ")
        return
    st.warning(deletion_services.confirmation(plan))
    yes, no, _ = st.columns([1, 1, 4])
    if no.button("Keep it", key="keep-model"):
        st.session_state.pop(CONFIRM_KEY, None)
        st.rerun()
    if yes.button("Delete for good", type="primary", key="delete-model-now"):
        outcome = deletion_services.delete_model_now(factory, settings, model_id=chosen["id"])
        st.session_state.pop(CONFIRM_KEY, None)
        if isinstance(outcome, ErrorInfo):
            show_error(outcome, prefix="Not deleted: ")
            return
        st.session_state[DELETED_KEY] = outcome
        st.query_params.pop("model", None)
        st.rerun()


def card_flops(
    chosen: dict[str, Any], info: ModelInfo, profile: InputProfile
) -> tuple[int | None, str]:
    """The FLOPs the card shows and the shapes they were counted at: intake's estimate for a
    model without dynamic dims, else the count at the input profile's shapes."""
    if not any(t.dynamic_dims for t in info.inputs):
        return info.flops_estimate, "at the model's fixed shapes"
    shapes = json.dumps(profile.shapes, sort_keys=True)
    counted = flops_at(chosen["sha256"], chosen["path"], shapes)
    if counted is None:
        return info.flops_estimate, "dynamic dims at 1 (the profile's shapes could not be counted)"
    return counted, f"{AT_PROFILE} (" + "; ".join(profile.lines()) + ")"


@st.cache_data(show_spinner=False, max_entries=128)
def flops_at(sha256: str, path: str, shapes: str) -> int | None:
    """FLOPs of the model (its digest keys the cache) at these profile shapes (JSON)."""
    stored = model_file(state.settings(), path=path, sha256=sha256)
    return profile_flops(stored, InputProfile(shapes=json.loads(shapes)))


def input_profile_section(chosen: dict[str, Any], info: ModelInfo, profile: InputProfile) -> None:
    """The shapes and values every job runs this model at, editable; guessed sizes named."""
    st.subheader("Input profile")
    done = st.session_state.pop("profile_saved", None)
    if done:
        st.success(done)
    if chosen.get("parent_id"):
        st.caption(
            f"A variant is fed like the model it was made from (#{chosen['parent_id']}): "
            "editing this profile edits that model's."
        )
    st.caption(profile_caption(info, profile))
    if profile.guessed:
        st.warning(
            "Some sizes were guessed (marked below): check them against the inputs your "
            "model really gets, and save."
        )
    rows = profile_rows(profile, info).to_dict("records")
    specs = {spec.name: spec for spec in info.inputs}
    with st.form(f"input_profile_{chosen['id']}"):
        for row in rows:
            profile_row_inputs(chosen["id"], row, specs[row["input"]])
        saved = st.form_submit_button("Save input profile")
    if saved:
        save_input_profile(chosen["id"], rows, info, profile)


def profile_caption(info: ModelInfo, profile: InputProfile) -> str:
    """What the profile is for, and how the batch axis takes each job's batch sizes."""
    batch = batch_note(info, profile.moved_axes(info.inputs))
    return (
        "Every job on this model (benchmark, optimize's timing and accuracy, profile, soak, "
        "batching, export) runs at these shapes and values unless the job says otherwise. "
        + (
            "The batch axis takes each job's batch sizes (a state [layers, batch, hidden] is "
            "batched on axis 1); 'none' runs the input at its full shape. "
            if batch.dynamic
            else f"The model fixes its batch at {batch.fixed or 'its declared size'}, so jobs "
            "run it at that batch. "
        )
        + "An empty value feeds generated data; an .npz sets a small array as the value."
    )


def profile_row_inputs(model_id: int, row: dict[str, Any], spec: TensorSpec) -> None:
    """One input's shape, batch axis, value and array upload, written into `row`."""
    name = row["input"]
    key = f"profile_{model_id}_{name}"
    cols = st.columns([2, 3, 1, 1])
    cols[0].markdown(f"**{name}** · {row['dtype']} · declared `{row['declared']}`")
    row["shape"] = cols[1].text_input(
        f"Shape of {name}",
        row["shape"],
        help="The full shape at batch 1, sizes separated by commas (empty: a scalar).",
        key=f"{key}_shape",
    )
    axes = batch_axis_choices(spec)
    row["batch axis"] = cols[2].selectbox(
        f"Batch axis of {name}",
        axes,
        index=axes.index(row["batch axis"]) if row["batch axis"] in axes else 0,
        help="The axis that takes each job's batch size (1 for a state [layers, batch, "
        "hidden]); 'none' runs the input at this full shape whatever the batch.",
        key=f"{key}_axis",
    )
    row["value"] = cols[3].text_input(
        f"Value of {name}",
        row["value"],
        help="A fixed number; empty feeds generated data; 'array ...' keeps the array set before.",
        key=f"{key}_value",
    )
    upload = cols[3].file_uploader(
        f"Array for {name} (.npz)",
        type=["npz"],
        max_upload_size=state.settings().max_upload_mb,
        help="A small array (one request's value) as the fixed value, named after "
        "the input or alone in the file.",
        key=f"{key}_array",
    )
    row["upload"] = upload.getvalue() if upload is not None else None
    if row["how it was set"] != "chosen":
        cols[0].caption(f"Guessed: {row['how it was set']}")


def save_input_profile(
    model_id: int, rows: list[dict[str, Any]], info: ModelInfo, before: InputProfile
) -> None:
    """Save the edited rows as the model's profile and show the card again, or say why not."""
    try:
        new = profile_from_rows(rows, info, before=before)
        save_profile(state.session_factory(), model_id, new)
    except OptistudioError as exc:
        show_error(exc, prefix="Profile not saved: ")
        return
    st.session_state["profile_saved"] = (
        "Saved. Every job on this model now runs at " + "; ".join(new.lines()) + "."
    )
    st.rerun()  # the card then shows the saved profile, its guesses gone


def benchmark_form(
    chosen: dict[str, Any],
    info: ModelInfo,
    profile: InputProfile,
    live: list[tuple[str, str, str]],
    *,
    decoder: bool = False,
) -> None:
    """The benchmark form at the input profile, then the card's offers (free the batch, the
    declared dims); Benchmark sends the job."""
    st.subheader("Benchmark")
    batch = batch_note(info, profile.moved_axes(info.inputs))
    with st.form("benchmark"):
        make_spec = benchmark_inputs(live, batch, decoder=decoder)
        st.caption(
            model_decoder.BENCH_CAPTION
            if decoder
            else "Inputs: "
            + "; ".join(profile.lines())
            + f" (the input profile above; {batch.caption})."
        )
        submitted = st.form_submit_button("Benchmark", type="primary")
    if batch.freeable:
        dynamic_batch_offer(chosen["id"])
        pages.link("batching", "Batch it on the Batching page", query={"model": str(chosen["id"])})
    if not decoder:
        free_dims_offer(chosen["id"], info)
    if submitted:
        send_benchmark(chosen["id"], make_spec)


def benchmark_inputs(
    live: list[tuple[str, str, str]], batch: BatchNote, *, decoder: bool
) -> Callable[[], BenchmarkSpec]:
    """The benchmark's target and settings; what makes its spec from them."""
    target = st.selectbox(
        "Target (backend · device · precision)",
        live or [("onnxruntime", "cpu", "fp32")],
        format_func=" · ".join,
        help="What the live workers offer (Hardware page). The outputs of every target but "
        "ONNX Runtime FP32 on CPU are checked against that reference.",
    )
    cols = st.columns(4)
    batches = cols[0].text_input(
        "Batch sizes",
        "1,8" if batch.dynamic else str(batch.fixed or ""),
        help=HELP["batch_sizes"] if batch.dynamic else batch.caption.capitalize() + ".",
        disabled=not batch.dynamic,
    )
    threads = cols[1].number_input("Threads (0 = default)", 0, 256, 0, help=HELP["threads"])
    off = {"disabled": decoder}  # a decoder is timed by its decode loop, not these
    warmup = cols[2].number_input(
        "Warm-up runs", 0, 10_000, DEFAULTS.warmup_runs, help=HELP["warmup_runs"], **off
    )
    min_runs = cols[3].number_input(
        "Min runs", 1, 1_000_000, DEFAULTS.min_runs, help=HELP["min_runs"], **off
    )
    cols = st.columns(4)
    min_seconds = cols[0].number_input(
        "Min seconds", 0.0, 3600.0, DEFAULTS.min_seconds, help=HELP["min_seconds"], **off
    )
    max_seconds = cols[1].number_input(
        "Max seconds (cap)", 0.1, 3600.0, DEFAULTS.max_seconds, help=HELP["max_seconds"], **off
    )
    cores = cols[2].text_input("CPU cores (empty = any)", "", help=HELP["cpu_affinity"], **off)

    def spec() -> BenchmarkSpec:
        return BenchmarkSpec(
            backend=target[0],
            device=target[1],
            precision=target[2],
            batch_sizes=parse_int_list(batches, "batch sizes") if batch.dynamic else None,
            cpu_affinity=parse_int_list(cores, "CPU cores"),
            threads=int(threads) or None,
            warmup_runs=int(warmup),
            min_runs=int(min_runs),
            min_seconds=float(min_seconds),
            max_seconds=float(max_seconds),
        )

    return spec


def send_benchmark(model_id: int, make_spec: Callable[[], BenchmarkSpec]) -> None:
    """Send the benchmark; its settings become those of "Run on every target"."""
    sent = submitting.submit(BENCHMARK, model_id, make_spec, what="benchmark")
    if sent is None:
        return
    st.success(f"Benchmark job #{sent.job_id} submitted.")
    pages.link("jobs", "Follow it on the Jobs page")
    st.session_state["last_benchmark_spec"] = sent.spec


def every_target(chosen: dict[str, Any], targets: list[tuple[str, str, str]]) -> None:
    """One benchmark job per backend · precision on the chosen device, each to its worker."""
    devices = sorted({device for _, device, _ in targets})
    if not devices:
        return
    cols = st.columns([2, 3])
    device = cols[0].selectbox("Device", devices, key="all_targets_device")
    mine = [t for t in targets if t[1] == device]
    cols[1].caption(
        f"{len(mine)} targets on {device}: "
        + ", ".join(f"{b} {p}" for b, _, p in mine)
        + ". Same settings as the last benchmark you submitted (or the defaults)."
    )
    if not st.button(f"Run on every target of {device}", key="run_all_targets"):
        return
    base = st.session_state.get("last_benchmark_spec") or BenchmarkSpec()
    submitted, refused = [], []
    for backend, dev, precision in mine:
        target = {"backend": backend, "device": dev, "precision": precision}
        outcome = submitting.send(BENCHMARK, chosen["id"], partial(base.model_copy, update=target))
        if isinstance(outcome, Refused):
            refused.append((f"{backend} {precision}: ", outcome))
        else:
            submitted.append(outcome.job_id)
    if submitted:
        st.success(
            f"Submitted {len(submitted)} benchmark jobs: "
            + ", ".join(f"#{j}" for j in submitted)
            + "."
        )
        pages.link(
            "results", "Compare them on the Results page", query={"model": str(chosen["id"])}
        )
    for prefix, refusal in refused:
        submitting.show_refusal(refusal, prefix=prefix)


def parse_int_list(text: str, what: str) -> list[int] | None:
    """'1, 8' -> [1, 8]; '' -> None; anything else names the field and the expected form."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        return None
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise BadSetting(f"{what} must be integers separated by commas, got {text!r}") from None
