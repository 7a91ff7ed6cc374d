"""pipeline.json, version 1: how to serve one model, one schema for every writer and reader.

Written by the export bundle (`optistudio.core.report.bundle`) and the Batching page
(`optistudio.studio.batching_export`) through one function, `pipeline_text`, which validates
against `PipelineFile` (extra="forbid", `schema_version: 1`) before a byte is written. Read back
by `PipelineOptimizer.from_file` and `optistudio serve` (`opened_pipeline`). The JSON Schema is
`PipelineFile.model_json_schema()`, committed as docs/pipeline.schema.json and kept equal by
tests/core/batching/test_pipeline_file.py.

Paths inside ("model", "triton", "openvino", LiteRT files) are relative to the folder that holds
pipeline.json. "serving" is the batching setting to serve (`BatchingSettings` and where it came
from); None serves with the runtime's defaults. A LiteRT entry lists the .tflite's own tensors,
as its interpreter names and shapes them (onnx2tf writes `Identity...` outputs and channels-last
layouts), beside the ONNX names they stand for.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.errors import InvalidSpec, describe_validation_error

SCHEMA_VERSION = 1
FILE_NAME = "pipeline.json"
JSON_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic generates
Dim = int | str | None


class PipelineTensor(BaseModel):
    """One input or output as the served file declares it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The tensor's name in the served file.")
    dtype: str = Field(description="numpy dtype name, e.g. 'float32', 'int64'.")
    shape: list[Dim] = Field(description="Dims; a name or null marks a dynamic one.")
    onnx_name: str | None = Field(
        default=None, description="LiteRT only: the ONNX tensor this one was converted from."
    )
    layout: str | None = Field(
        default=None,
        description="LiteRT only: 'channels_last' when the dims are the ONNX tensor's with the "
        "channels moved last (NCHW -> NHWC), 'as_onnx' when they are the same, else null.",
    )


class ServingSetting(BatchingSettings):
    """The batching setting to serve, and where it came from."""

    source: Literal["verified", "recommended", "profiled", "default", "sliders", "given"] | None = (
        Field(default=None, description="Who chose it: a Verify, a recommendation, ...")
    )
    job: int | None = Field(default=None, description="The job it came from, if any.")
    verify_job: int | None = Field(default=None, description="The Verify that measured it.")
    note: str = Field(default="", description="One sentence on where the setting comes from.")

    def batching(self) -> BatchingSettings:
        """The runtime's settings alone."""
        return BatchingSettings.model_validate(
            self.model_dump(include=set(BatchingSettings.model_fields))
        )


class LiteRtTensors(BaseModel):
    """A .tflite's own inputs and outputs, read from its interpreter."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[PipelineTensor]
    outputs: list[PipelineTensor]


class LiteRtPart(BaseModel):
    """The bundle's litert/ files: precision -> path, and each file's own tensors."""

    model_config = ConfigDict(extra="forbid")

    runs_on: str
    files: dict[str, str] = Field(default_factory=dict)
    tensors: dict[str, LiteRtTensors] = Field(
        default_factory=dict,
        description="Precision -> the file's tensors (absent where no interpreter was here).",
    )
    versions: dict[str, str] = Field(default_factory=dict)


class PipelineFile(BaseModel):
    """pipeline.json v1: the model to serve, its tensors, and the setting to batch it with."""

    model_config = ConfigDict(extra="forbid", title="pipeline.json")

    schema_version: Literal[1] = Field(description="Always 1 for this schema.")
    written_by: Literal["bundle", "batching_page"] = Field(description="Which writer made it.")
    name: str = Field(min_length=1, description="The name the model is served under.")
    model: str = Field(
        description="The model file, relative to pipeline.json's folder: the ONNX file, or for "
        "format openvino_ir the .xml (its .bin beside it)."
    )
    format: Literal["onnx", "openvino_ir"] = Field(
        default="onnx",
        description="'onnx', or 'openvino_ir' for a variant that exists only as OpenVINO IR "
        "(served by OpenVINO alone).",
    )
    backend: str = Field(default="onnxruntime", description="Registered backend name.")
    device: str = Field(default="cpu", description="'cpu', 'cuda:0', ...")
    precision: str = Field(default="fp32", description="The precision the model is made for.")
    threads: int | None = Field(
        default=None, ge=1, le=256, description="Intra-op threads per instance; null: default."
    )
    opsets: dict[str, int] = Field(default_factory=dict)
    inputs: list[PipelineTensor]
    outputs: list[PipelineTensor]
    symbolic_dims: dict[str, str] = Field(
        default_factory=dict, description="Placeholder dim names -> the expression they stand for."
    )
    preprocessing: dict[str, Any] | None = None
    input_profile: dict[str, Any] | None = Field(
        default=None, description="The shapes and values the model was measured at."
    )
    measured_batch_sizes: list[int] = Field(default_factory=list)
    serving: ServingSetting | None = Field(
        default=None, description="The batching setting to serve; null: the runtime's default."
    )
    triton: str | None = Field(default=None, description="The Triton model folder, if any.")
    triton_served: str | None = Field(
        default=None, description="How Triton serves a model whose batch is fixed."
    )
    openvino: str | None = Field(default=None, description="The OpenVINO IR (.xml), if any.")
    runs_on: dict[str, str] = Field(default_factory=dict)
    coreml: dict[str, Any] | None = None
    litert: LiteRtPart | None = None
    genai: dict[str, Any] | None = None

    def batching(self) -> BatchingSettings:
        """The settings the runtime serves with."""
        return self.serving.batching() if self.serving else BatchingSettings()


def json_schema() -> dict[str, Any]:
    """The JSON Schema of pipeline.json v1 (docs/pipeline.schema.json)."""
    return {"$schema": JSON_SCHEMA_DRAFT, **PipelineFile.model_json_schema()}


def pipeline_text(values: Mapping[str, Any]) -> str:
    """The one writer: `values` checked against the schema, as pipeline.json's text."""
    document = PipelineFile.model_validate({"schema_version": SCHEMA_VERSION, **values})
    return json.dumps(document.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_pipeline(text: str | bytes, where: str = FILE_NAME) -> PipelineFile:
    """A pipeline.json read back; InvalidSpec naming the problem for anything else."""
    try:
        values = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec(f"{where} is not JSON: {exc}.") from None
    if not isinstance(values, dict) or "schema_version" not in values:
        raise InvalidSpec(
            f"{where} has no schema_version: it was written before pipeline.json v1 (or is "
            "another file).",
            hint="Export the bundle again (optistudio export MODEL_ID), or download pipeline.json "
            "from the Batching page again.",
        )
    try:
        return PipelineFile.model_validate(values)
    except ValidationError as exc:
        raise InvalidSpec(
            f"{where} does not follow pipeline.json v1: {describe_validation_error(exc)}",
            hint="docs/pipeline.schema.json is the schema; export the file again.",
        ) from None


@dataclass(frozen=True)
class OpenedPipeline:
    """A pipeline.json read, with the folder its paths are relative to."""

    document: PipelineFile
    folder: Path

    @property
    def model_path(self) -> Path:
        """The ONNX file; InvalidSpec when it lies outside the folder or is missing, or is an
        OpenVINO IR (format openvino_ir), which the batching runtime does not serve."""
        if self.document.format != "onnx":
            raise InvalidSpec(
                f"pipeline.json's model {self.document.model!r} is an OpenVINO IR: this variant "
                "exists only as OpenVINO IR, and the batching runtime serves ONNX files.",
                hint="Serve it with OpenVINO (the bundle's openvino/run.py) or Triton's openvino "
                "backend (its triton/ folder).",
            )
        path = (self.folder / self.document.model).resolve()
        if not path.is_relative_to(self.folder.resolve()):
            raise InvalidSpec(
                f"pipeline.json's model {self.document.model!r} lies outside its folder."
            )
        if not path.is_file():
            raise InvalidSpec(
                f"The model pipeline.json names, {self.document.model!r}, is not in {self.folder}.",
                hint="Put the .onnx file beside pipeline.json under that name.",
            )
        return path


@contextmanager
def opened_pipeline(path: str | Path) -> Iterator[OpenedPipeline]:
    """A bundle (.zip, or its unzipped folder) or a pipeline.json, opened to serve. A zip's
    pipeline.json and model/ folder are unpacked to a temporary folder, removed on exit."""
    path = Path(path)
    if path.is_dir():
        path = path / FILE_NAME
    if not path.is_file():
        raise InvalidSpec(
            f"No bundle or pipeline.json at {path}.",
            hint="Give an export bundle (.zip), its unzipped folder, or a pipeline.json.",
        )
    if not zipfile.is_zipfile(path):
        yield OpenedPipeline(parse_pipeline(path.read_bytes(), str(path)), path.parent)
        return
    folder = Path(tempfile.mkdtemp(prefix="optistudio-serve-"))
    try:
        yield OpenedPipeline(_unpack(path, folder), folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _unpack(bundle: Path, folder: Path) -> PipelineFile:
    """pipeline.json and the model's folder from a bundle, into `folder`."""
    with zipfile.ZipFile(bundle) as archive:
        if FILE_NAME not in archive.namelist():
            raise InvalidSpec(
                f"{bundle.name} holds no pipeline.json: it is not an export bundle.",
                hint="Make one with `optistudio export MODEL_ID`.",
            )
        document = parse_pipeline(archive.read(FILE_NAME), f"{bundle.name}:{FILE_NAME}")
        prefix = document.model.rsplit("/", 1)[0] + "/" if "/" in document.model else ""
        for member in archive.namelist():
            wanted = member.startswith(prefix) if prefix else member == document.model
            if wanted and not member.endswith("/"):
                _extract(archive, member, folder)
    return document


def _extract(archive: zipfile.ZipFile, member: str, folder: Path) -> None:
    target = (folder / member).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise InvalidSpec(f"The bundle's member {member!r} points outside its folder.")
    target.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as source, target.open("wb") as out:
        shutil.copyfileobj(source, out)
