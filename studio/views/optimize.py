"""Optimize: pick recipes (or Auto), data and an accuracy budget; see each variant's cost."""

from __future__ import annotations

from typing import Any

import streamlit as st
from pydantic import ValidationError

from optistudio.core.backends import backends
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.errors import describe_validation_error
from optistudio.core.fusion.registry import fusion_patterns
from optistudio.core.model.info import ModelInfo
from optistudio.core.optimize.recipes import ANY, AUTO, BUILTIN_RECIPES
from optistudio.core.passes.base import passes
from optistudio.core.passes.qat import QatConfig
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.studio import cached, charts, pages, state, submitting
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import readable_frame
from optistudio.studio.model_picker import chosen_model
from optistudio.studio.model_services import model_file
from optistudio.studio.optimize_run import OptimizeRun
from optistudio.studio.optimize_services import (
    OptimizeForm,
    TaskHint,
    budget_help,
    build_spec,
    form_defaults,
    pass_settings_table,
    task_choices,
    task_hint,
    task_table,
    variants_table,
)

BUDGET_HELP = budget_help()
QAT_WHERE = (
    "Quantization-aware training (recipe qat) fine-tunes the model with PyTorch on the worker "
    "that runs the job (its GPU when its torch sees one, else its CPU; a run with QAT goes to a "
    "worker that trains on a GPU first), on this training data, kept apart from the evaluation "
    "data above; it needs the qat extra on that worker (`pip install 'optistudio[qat]'`). Auto "
    "offers it only when every post-training INT8 variant misses the accuracy budget and "
    "training data is given here. Without training labels the model is distilled from its "
    "FP32 outputs; a .zip of images is read with the image preprocessing below."
)
DEFAULTS = form_defaults()
NO_DATA_WARNING = (
    "No data given: every variant is judged on built-in samples (real photographs, rendered "
    "text, sentences, speech-like audio or file bytes in the model's shapes), the INT8 ones "
    "calibrated on others, where the model's inputs have such a set; else on random inputs. "
    "Accuracy then means agreement with the original on those samples, not on your data: "
    "Auto may choose an INT8 variant calibrated on built-in samples when its task check "
    "passes, and marks it so. Give your data above to confirm."
)
DECODER_CAPTION = (
    "A decoder is timed by greedy decoding against its FP32 original, interleaved in the same "
    "run: tokens/s at batch 1 and the time to first token (TTFT) of a prompt, each beside the "
    "original's; it is judged by its perplexity on the text and the increase over the "
    "original's, and its size is its files on disk against the FP32 ones."
)
DECODER_FORM = (
    "A decoder's variants are weight-only (nothing to calibrate), judged by perplexity on a "
    "text (yours, else built-in text) and timed by decoding: input sizes, labels, the cosine "
    "floor and the judged output do not apply to it."
)
DECODER_NO_DATA = (
    "No text given: every variant's perplexity is measured on built-in text, not yours. Give "
    "a .txt or token ids (.npy) above to confirm."
)
PROFILE_CAPTION = (
    "Variants are timed, checked and calibrated at the model's input profile (its shapes and "
    "values, set on the model card on the Models page); with data, the data's shapes replace "
    "the sizes the profile only guessed."
)
TARGET_HELP = (
    "'Any': Auto also chooses the backend — every variant is checked and timed on its own "
    "backend against the original on ONNX Runtime. A named backend: variants are timed on it "
    "against the original there; Auto picks candidates for it (e.g. NNCF INT8 for OpenVINO). "
    "The job goes to a worker that offers it. litert makes .tflite variants: the conversion "
    "runs on a worker with the litert extra (pip install 'optistudio[litert]' there); the "
    "Hardware page shows which workers have it."
)
RECIPE_LABELS = {AUTO: "Auto (candidates for this model)"} | {
    name: recipe.label for name, recipe in BUILTIN_RECIPES.items()
}


def render() -> None:
    st.title("Optimize")
    st.caption(
        "Each recipe makes one variant of the model. Every variant is checked against the "
        "original on your data (without it, on built-in samples: real photographs, text, "
        "sentences, audio or bytes made to the model's shapes; else random inputs) and timed "
        "against it interleaved, so its speedup comes with a confidence interval."
    )
    chosen = chosen_model("Add a model on the Models page first.")
    if chosen is None:
        return
    optimize_form(chosen)
    with st.expander("Passes and their settings"):
        pass_catalogue()
    show_runs(chosen["id"], chosen["name"])


@st.cache_data(show_spinner=False, max_entries=64)
def read_task_hint(sha256: str, path: str, task: str | None) -> TaskHint:
    """The model's task hint, read from its graph once per file (the digest keys it)."""
    return task_hint(model_file(state.settings(), path=path, sha256=sha256), task)


def optimize_form(chosen: dict[str, Any]) -> None:
    """The form: recipes and target, data, QAT's training data, the task and its budget,
    then the expanders (tasks, image preprocessing, pass settings); Optimize sends the job."""
    hint = read_task_hint(chosen["sha256"], chosen["path"], chosen.get("task"))
    off = {"disabled": hint.decoder}  # what a decoder's run does not read
    with st.form("optimize"):
        st.caption(DECODER_FORM if hint.decoder else PROFILE_CAPTION)
        recipes, target = recipe_inputs()
        data, labels = data_inputs(off)
        with st.expander("Training data for QAT (optional)"):
            train, train_labels, epochs = training_inputs()
        judged = task_inputs(hint) | budget_inputs(hint, off)
        accuracy_output = st.text_input(
            "Output the budget judges (empty = the first output)",
            "",
            help="For models with several outputs, name the one people use, e.g. "
            "'sentence_embedding' rather than 'last_hidden_state'.",
            **off,
        )
        with st.expander("Tasks and their metrics"):
            st.dataframe(readable_frame(task_table()), hide_index=True, width="stretch")
        with st.expander("Image preprocessing (for a .zip of images)"):
            image_settings = image_inputs()
        with st.expander("Pass settings: fusion patterns (enable and order), INT8 options"):
            pass_settings = pass_settings_inputs()
        submitted = st.form_submit_button("Optimize", type="primary")
    if submitted:
        form = OptimizeForm(
            recipes=recipes,
            target=target,
            pass_settings=pass_settings,
            accuracy_output=accuracy_output.strip() or None,
            image_preprocessing=image_settings,
            epochs=epochs,
            **judged,
        )
        submit(chosen, form, data, labels, train, train_labels, decoder=hint.decoder)


def recipe_inputs() -> tuple[list[str], str]:
    """The recipes picked (Auto first) and the backend their variants target."""
    left, right = st.columns([3, 1])
    recipes = left.multiselect(
        "Recipes", list(RECIPE_LABELS), default=[AUTO], format_func=RECIPE_LABELS.get
    )
    target = right.selectbox(
        "Target backend",
        [ANY, *(spec.name for spec in backends)],
        format_func=lambda name: "Any backend on this CPU" if name == ANY else name,
        help=TARGET_HELP,
    )
    return recipes, target


def data_inputs(off: dict[str, bool]) -> tuple[Any, Any]:
    """The calibration / accuracy data and its labels (uploads; labels off for a decoder)."""
    upload_mb = state.settings().max_upload_mb
    left, right = st.columns(2)
    data = left.file_uploader(
        "Calibration / accuracy data (.npz, .zip of images, or a decoder's .txt, optional)",
        type=["npz", "zip", "txt", "npy"],
        max_upload_size=upload_mb,
        help="An .npz of named input arrays (samples along the first axis), or a .zip of "
        "images (set how they become inputs under 'Image preprocessing'); for a decoder, a "
        ".txt (tokenized by the tokenizer.json beside the model) or token ids (.npy). "
        "Empty: built-in samples stand in (real images, text, audio... not yours), else "
        "random inputs.",
    )
    labels = right.file_uploader(
        "Labels (optional)",
        type=["npy", "csv", "txt", "json"],
        max_upload_size=upload_mb,
        help="One per sample, read by the task: class ids (.npy/.csv) for a classifier, "
        "strings (.txt, a line each) for a text recognizer, boxes (.json) for a detector.",
        **off,
    )
    return data, labels


def task_inputs(hint: TaskHint) -> dict[str, Any]:
    """The task the variants are judged in, its budget in its own terms and "speed only"."""
    left, middle, right = st.columns([2, 3, 1])
    tasks = task_choices()
    task = left.selectbox(
        "Task",
        list(tasks),
        format_func=tasks.get,
        help="What the variants are judged by: the strings a recognizer reads, the boxes a "
        "detector finds, top-1 of a classifier... Recognized from the outputs unless set; "
        f"this model's outputs read as: {hint.label}.",
    )
    budgets = middle.text_input(
        f"Budget in the task's terms (empty = {hint.empty_means()})",
        "",
        placeholder=hint.placeholder,
        help="METRIC=LIMIT, comma separated; the metric's direction decides the side. The "
        "tasks and their metrics are listed under 'Tasks and their metrics' below.",
    )
    speed_only = right.checkbox(
        "Speed only",
        help="Let Auto choose INT8 variants calibrated on random inputs when no data is "
        "given, or on built-in samples with no task to check them (their accuracy is then "
        "agreement on those inputs only).",
    )
    return {"task": task or None, "budgets": budgets, "speed_only": speed_only}


def budget_inputs(hint: TaskHint, off: dict[str, bool]) -> dict[str, Any]:
    """The generic budget (least cosine, largest top-1 drop where the task reads top-1) and
    how long each variant is timed."""
    cols = st.columns(3)
    min_cosine = cols[0].number_input(
        "Least mean cosine",
        0.0,
        1.0,
        DEFAULTS.min_cosine,
        step=0.001,
        format="%.3f",
        help=BUDGET_HELP.get("min_cosine"),
        **off,
    )
    max_drop = (
        cols[1].number_input(
            "Largest top-1 drop",
            0.0,
            1.0,
            DEFAULTS.max_top1_drop,
            step=0.005,
            format="%.3f",
            help=BUDGET_HELP.get("max_top1_drop"),
        )
        if hint.reads_top1
        else None
    )
    if not hint.reads_top1:
        kind = hint.label.lower()
        article = "an" if kind[:1] in "aeiou" else "a"
        cols[1].caption(f"No top-1 budget: {article} {kind} model is judged by its task.")
    seconds = cols[2].number_input(
        "Timing seconds per variant",
        0.2,
        600.0,
        DEFAULTS.seconds,
        help="Least time each variant is timed against the original.",
    )
    return {"min_cosine": min_cosine, "max_top1_drop": max_drop, "seconds": seconds}


def training_inputs() -> tuple[Any, Any, int]:
    """The qat recipe's training inputs and class ids (uploads) and its most epochs."""
    st.caption(QAT_WHERE)
    st.caption(state.qat_places())
    help_of = {n: f.description for n, f in QatConfig.model_fields.items()}
    left, middle, right = st.columns([3, 2, 1])
    upload_mb = state.settings().max_upload_mb
    train = left.file_uploader(
        "Training data for QAT (.npz or .zip of images)",
        type=["npz", "zip"],
        help=help_of["train_path"],
        max_upload_size=upload_mb,
    )
    train_labels = middle.file_uploader(
        "Training labels (optional)",
        type=["npy", "csv"],
        help=help_of["train_labels_path"],
        max_upload_size=upload_mb,
    )
    epochs = right.number_input(
        "QAT epochs", 1, 1000, DEFAULTS.epochs, step=1, help=help_of["epochs"]
    )
    return train, train_labels, int(epochs)


def image_inputs() -> ImagePreprocessing:
    """Resize to the model's size; layout, colour order and normalisation as the model expects."""
    help_of = {n: f.description for n, f in ImagePreprocessing.model_fields.items()}
    cols = st.columns(4)
    layout = cols[0].selectbox("Layout", ["NCHW", "NHWC"], help=help_of["layout"])
    color = cols[1].selectbox("Colour", ["RGB", "BGR", "GRAY"], help=help_of["color"])
    mean = cols[2].text_input("Mean per channel", "0, 0, 0", help=help_of["mean"])
    std = cols[3].text_input("Std per channel", "1, 1, 1", help=help_of["std"])
    channels = 1 if color == "GRAY" else 3
    try:
        return ImagePreprocessing(
            layout=layout,
            color=color,
            mean=tuple(_floats(mean, channels)),
            std=tuple(_floats(std, channels)),
        )
    except ValidationError as exc:
        st.error(
            f"Image preprocessing: {describe_validation_error(exc)}. "
            f"Using the defaults for {color} instead."
        )
        return ImagePreprocessing(layout=layout, color=color)


def _floats(text: str, count: int) -> list[float]:
    """'0.5, 0.5, 0.5' -> floats; a single value is repeated for every channel."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    return values * count if len(values) == 1 else values or [0.0] * count


def pass_settings_inputs() -> dict[str, dict[str, Any]]:
    """Fusion patterns in the order picked (the order they run in) and INT8 granularity."""
    patterns = {p.name: p for p in fusion_patterns}
    default = sorted(patterns, key=lambda name: patterns[name].default_order)
    chosen = st.multiselect(
        "Fusion patterns, in the order they run",
        default,
        default=default,
        format_func=lambda name: patterns[name].label,
        help="Remove a pattern to disable it; remove and re-add to move it to the end.",
    )
    for name in chosen:
        kernels = ", ".join(patterns[name].backends).replace("*", "every backend")
        st.caption(f"**{patterns[name].label}** ({kernels}): {patterns[name].description}")
    per_channel = st.checkbox(
        "INT8: per-channel weight scales",
        value=True,
        help="Per output channel scales keep more accuracy; per-tensor is "
        "supported by more runtimes.",
    )
    return {
        "fusion": {"patterns": chosen},
        "int8_static": {"per_channel": per_channel},
        "int8_dynamic": {"per_channel": per_channel},
    }


def submit(
    chosen: dict[str, Any],
    form: OptimizeForm,
    data: Any,
    labels: Any,
    train: Any = None,
    train_labels: Any = None,
    *,
    decoder: bool = False,
) -> None:
    if not form.recipes:
        st.error("Pick at least one recipe, or Auto.")
        return

    def spec() -> OptimizeJobSpec:
        info = ModelInfo.model_validate(chosen["info"])
        return build_spec(
            state.settings(), info, form, data, labels, train=train, train_labels=train_labels
        )

    sent = submitting.submit(OPTIMIZE, chosen["id"], spec)
    if sent is None:
        return
    if not data:
        st.warning(DECODER_NO_DATA if decoder else NO_DATA_WARNING)
    st.success(f"Optimize job #{sent.job_id} submitted. Its variants appear below when it is done.")
    pages.link("jobs", "Follow it on the Jobs page")


def pass_catalogue() -> None:
    for info in passes:
        st.markdown(f"**{info.label}** (`{info.name}`) — {info.description}")
        table = pass_settings_table(info)
        if table.empty:
            st.caption("No settings: it takes what the run gives it.")
        else:
            st.dataframe(table, hide_index=True, width="stretch")


@st.fragment(run_every="3s")
def show_runs(model_id: int, model_name: str) -> None:
    runs = cached.optimization_runs(model_id)
    if not runs:
        st.info(f"No optimization run of {model_name} yet.")
        return
    for run in runs:
        show_run(run)


def show_run(run: OptimizeRun) -> None:
    st.subheader(f"Job #{run.id} · {run.model}")
    fed = f"  Inputs: {run.inputs}." if run.inputs else ""
    st.markdown(f"**{run.headline}**")
    st.caption(f"{run.message}  Data: {run.data}.{fed}")
    st.markdown(run.task)
    if run.task_reasons:
        with st.expander("How the task was read"):
            for reason in run.task_reasons:
                st.caption(reason)
    if run.not_your_data:
        st.warning(run.not_your_data)
    for note in run.notes:
        st.caption(f"Note: {note}")
    st.dataframe(
        variants_table(run.variants, run.task_name, run.task_metrics),
        hide_index=True,
        width="stretch",
        column_config={"chosen": st.column_config.CheckboxColumn("best")},
    )
    for label, error in run.failures:
        show_error(error, prefix=f"{label} failed: ")
    for line in run.not_applicable:
        st.info(line)
    for part in run.drilldown:
        with st.expander(f"Where {part['recipe']} and the original disagree most"):
            st.dataframe(readable_frame(part["rows"]), hide_index=True, width="stretch")
    if run.decoder:
        st.caption(DECODER_CAPTION)
        return
    if not charts.accuracy_points(run.variants):
        st.info(
            "No variant was made and timed, so there is no speedup/accuracy chart: each "
            "recipe's reason is above."
        )
        return
    st.plotly_chart(
        charts.speed_vs_accuracy(run.variants), width="stretch", key=f"variants-{run.id}"
    )
