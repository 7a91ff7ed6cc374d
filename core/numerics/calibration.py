"""Activation range estimation for static INT8 quantization, streamed batch by batch.

Every calibrated tensor x keeps a constant-size state: its signed minimum and maximum, the
number of finite values seen, and a histogram of |x| with B bins (B a power of two) over
[0, U], where U is a power of two >= max|x|. Bin j covers [j*w, (j+1)*w) with w = U/B.
When a batch exceeds U, U doubles k times and every 2^k adjacent bins merge into one: the
re-binned histogram is exactly what binning all data so far at the new width would give.
Two histograms merge the same way (widen both to the larger U, add counts), so state never
grows with the number of batches. The arrays ONNX Runtime returns are dropped after each batch.

From that state each method picks a clipping threshold t on |x|; the range is then
(max(min, -t), min(max, t)), i.e. never wider than what was seen:

- minmax: the running (min, max) itself.
- percentile p: t = upper edge of the first bin where the CDF of |x| reaches p/100.
- entropy (TensorRT's KL calibration): for each candidate of i kept bins, the reference P is
  hist[:i] with all counts beyond it added to its last bin; the candidate Q is hist[:i]
  quantized to 128 levels (each level's total spread evenly over the level's non-empty
  bins). t = i*w for the i minimising KL(P || Q) = sum P log(P / Q). As in TensorRT, the
  zero bin takes its neighbour's count, so the exact zeros a ReLU produces do not dominate.
- mse: for uniform quantization with 256 levels over the clipped range, the expected squared
  error of threshold t is
      E(t) = N_in(t) * D(t)^2 / 12 + sum_{c_j > t} n_j (c_j - t)^2,
  the rounding error of the in-range values (step D(t) = span(t) / 255, span(t) =
  min(max+, t) + min(min-, t), so D = 2t/255 for a signed tensor clipped on both sides) plus
  the clipping error of bin centres c_j beyond t. Suffix sums of n, n*c and n*c^2 give E for
  every candidate t = i*w at once; t is its argmin.
- distribution: what ONNX Runtime's Distribution calibrator yields for INT8 (its histogram
  spans [-max|x|, max|x|], and avg/std only matter for float8): the symmetric range
  (-max|x|, max|x|), except that a side never seen stays closed. ONNX Runtime removes a
  ReLU when activations are asymmetric, trusting its output range to start at 0; a range
  that opened below 0 there would let negative values through.

Memory: one batch of the chosen activations at a time, plus B counts per tensor.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import onnx

from optistudio.core.backends.reference import reference_session
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import DataMismatch, ModelLoadError
from optistudio.core.progress import ProgressCallback

if TYPE_CHECKING:
    import onnxruntime as ort

logger = logging.getLogger(__name__)

CalibrationMethod = Literal["minmax", "entropy", "percentile", "distribution", "mse"]
METHODS: tuple[str, ...] = ("minmax", "entropy", "percentile", "distribution", "mse")

DEFAULT_BINS = 2048
ENTROPY_LEVELS = 128
MSE_LEVELS = 256
MAX_ENTROPY_CANDIDATES = 512
"""Entropy tries every bin count from 128 up, with a stride that keeps at most this many."""

DEFAULT_OP_TYPES: tuple[str, ...] = (
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "Add",
    "Mul",
    "Relu",
    "Clip",
    "AveragePool",
    "GlobalAveragePool",
    "MaxPool",
    "Concat",
    "Softmax",
)
"""Ops whose float inputs and outputs are calibrated when no op types are given."""

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
_MIN_UPPER = 2.0**-24
_EXTERNAL_DATA_BYTES = 2**31 - 2**27


@dataclass
class HistogramCollector:
    """Streaming |x| histogram plus signed min/max of one tensor; see the module docstring."""

    bins: int = DEFAULT_BINS
    counts: np.ndarray = field(init=False)
    upper: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")
    total: int = 0

    def __post_init__(self) -> None:
        if self.bins < ENTROPY_LEVELS or self.bins & (self.bins - 1):
            raise ValueError(f"bins must be a power of two >= {ENTROPY_LEVELS}, got {self.bins}")
        self.counts = np.zeros(self.bins, dtype=np.int64)

    @property
    def width(self) -> float:
        return self.upper / self.bins

    @property
    def absmax(self) -> float:
        return max(abs(self.low), abs(self.high)) if self.total else 0.0

    def update(self, values: np.ndarray) -> None:
        """Add one batch of values (any shape, float dtype); non-finite values are ignored."""
        flat = np.asarray(values, dtype=np.float32).ravel()
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return
        self.low = min(self.low, float(flat.min()))
        self.high = max(self.high, float(flat.max()))
        self.total += int(flat.size)
        magnitudes = np.abs(flat)
        self._widen(_power_of_two_above(float(magnitudes.max())))
        index = np.minimum((magnitudes * (self.bins / self.upper)).astype(np.int64), self.bins - 1)
        self.counts += np.bincount(index, minlength=self.bins)

    def merge(self, other: HistogramCollector) -> None:
        """Add another collector's data to this one (same number of bins)."""
        if other.bins != self.bins:
            raise ValueError(f"cannot merge {other.bins} bins into {self.bins}")
        if other.total == 0:
            return
        incoming = HistogramCollector(self.bins)
        incoming.counts, incoming.upper = other.counts.copy(), other.upper
        target = max(self.upper, other.upper)
        incoming._widen(target)
        self._widen(target)
        self.counts += incoming.counts
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)
        self.total += other.total

    def _widen(self, upper: float) -> None:
        if upper <= self.upper:
            return
        if self.upper > 0:
            self.counts = _coarsen(self.counts, round(np.log2(upper / self.upper)))
        self.upper = upper


def _power_of_two_above(value: float) -> float:
    return max(_MIN_UPPER, float(2.0 ** np.ceil(np.log2(value)))) if value > 0 else _MIN_UPPER


def _coarsen(counts: np.ndarray, doublings: int) -> np.ndarray:
    """Counts at 2**doublings times the bin width, over the same number of bins."""
    bins = counts.size
    merged = np.zeros(bins, dtype=counts.dtype)
    if doublings >= np.log2(bins):
        merged[0] = counts.sum()
        return merged
    factor = 2**doublings
    merged[: bins // factor] = counts.reshape(-1, factor).sum(axis=1)
    return merged


def compute_ranges(
    method: str,
    collectors: Mapping[str, HistogramCollector],
    percentile: float = 99.99,
) -> dict[str, tuple[float, float]]:
    """(low, high) per tensor for a calibration method; see the module docstring."""
    if method not in METHODS:
        raise ValueError(f"Unknown calibration method {method!r}. Valid: {', '.join(METHODS)}.")
    return {name: tensor_range(method, hist, percentile) for name, hist in collectors.items()}


def tensor_range(
    method: str, hist: HistogramCollector, percentile: float = 99.99
) -> tuple[float, float]:
    """(low, high) of one tensor for a calibration method."""
    if hist.total == 0:
        return 0.0, 0.0
    if method == "minmax":
        return hist.low, hist.high
    if method == "distribution":
        low = -hist.absmax if hist.low < 0 else hist.low
        return low, hist.absmax if hist.high > 0 else hist.high
    if method == "percentile":
        threshold = percentile_threshold(hist, percentile)
    elif method == "entropy":
        threshold = entropy_threshold(hist)
    else:
        threshold = mse_threshold(hist)
    return max(hist.low, -threshold), min(hist.high, threshold)


def percentile_threshold(hist: HistogramCollector, percentile: float) -> float:
    """Upper edge of the first bin where the CDF of |x| reaches `percentile` / 100."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    cdf = np.cumsum(hist.counts) / hist.counts.sum()
    index = int(np.searchsorted(cdf, percentile / 100.0))
    return min(index + 1, hist.bins) * hist.width


def entropy_threshold(hist: HistogramCollector, levels: int = ENTROPY_LEVELS) -> float:
    """TensorRT's threshold: i * width for the kept-bin count i minimising KL(P || Q)."""
    counts = hist.counts.astype(np.float64)
    counts[0] = counts[1]
    occupied = np.flatnonzero(counts)
    if occupied.size == 0:
        return hist.absmax
    last = max(int(occupied.max()) + 1, levels)
    stride = max(1, (last - levels) // MAX_ENTROPY_CANDIDATES)
    candidates = list(range(levels, last + 1, stride))
    divergences = [_kl_divergence(counts, kept, levels) for kept in candidates]
    return candidates[int(np.argmin(divergences))] * hist.width


def _kl_divergence(counts: np.ndarray, kept: int, levels: int) -> float:
    sliced = counts[:kept]
    reference = sliced.copy()
    reference[-1] += counts[kept:].sum()
    nonzero = sliced != 0
    starts = (np.arange(levels) * kept) // levels
    sizes = np.diff(np.append(starts, kept))
    level_sums = np.add.reduceat(sliced, starts)
    level_nonzero = np.add.reduceat(nonzero.astype(np.float64), starts)
    spread = np.divide(level_sums, level_nonzero, out=np.zeros(levels), where=level_nonzero > 0)
    candidate = np.repeat(spread, sizes) * nonzero
    return _kl(reference, candidate)


def _kl(reference: np.ndarray, candidate: np.ndarray) -> float:
    p = reference / reference.sum()
    q_total = candidate.sum()
    if q_total == 0:
        return float("inf")
    q = np.maximum(candidate / q_total, 1e-12)
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def mse_threshold(hist: HistogramCollector, levels: int = MSE_LEVELS) -> float:
    """The threshold t = i * width minimising rounding plus clipping squared error."""
    counts = hist.counts.astype(np.float64)
    centres = (np.arange(hist.bins) + 0.5) * hist.width
    thresholds = np.arange(1, hist.bins + 1) * hist.width
    inside = np.cumsum(counts)
    tail0, tail1, tail2 = (_suffix_sum(counts * centres**k)[1:] for k in range(3))
    span = np.minimum(max(hist.high, 0.0), thresholds) + np.minimum(max(-hist.low, 0.0), thresholds)
    rounding = inside * (span / (levels - 1)) ** 2 / 12.0
    clipping = tail2 - 2 * thresholds * tail1 + thresholds**2 * tail0
    return float(thresholds[int(np.argmin(rounding + clipping))])


def _suffix_sum(values: np.ndarray) -> np.ndarray:
    """out[i] = sum(values[i:]), with out[len] = 0."""
    return np.append(np.cumsum(values[::-1])[::-1], 0.0)


@dataclass
class ActivationStats:
    """Streaming statistics of the calibrated tensors and how many batches fed them."""

    collectors: dict[str, HistogramCollector]
    batches: int


def select_activations(model: onnx.ModelProto, op_types: Iterable[str] | None = None) -> list[str]:
    """Float, non-constant inputs and outputs of the nodes of `op_types`, in graph order.

    Mirrors ONNX Runtime's own choice of tensors to calibrate; needs shape-inferred types.
    """
    wanted = set(op_types or DEFAULT_OP_TYPES)
    types = _elem_types(model.graph)
    constants = {init.name for init in model.graph.initializer}
    chosen: dict[str, None] = {}
    for node in model.graph.node:
        if node.op_type not in wanted:
            continue
        for name in itertools.chain(node.input, node.output):
            if name and name not in constants and types.get(name) in _FLOAT_TYPES:
                chosen[name] = None
    return list(chosen)


def _elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    infos = itertools.chain(graph.value_info, graph.input, graph.output)
    return {info.name: info.type.tensor_type.elem_type for info in infos}


def collect_activation_stats(
    model: Path,
    source: CalibrationSource,
    tensors: list[str] | None = None,
    progress: ProgressCallback | None = None,
    *,
    op_types: Sequence[str] | None = None,
    max_batches: int | None = None,
    work_dir: Path,
    bins: int = DEFAULT_BINS,
) -> ActivationStats:
    """Run the model over calibration batches and stream the chosen activations' statistics.

    `tensors` defaults to `select_activations(model, op_types)`. A copy of the model with those
    tensors as extra outputs is written to `work_dir` and removed afterwards. Raises
    DataMismatch when a batch does not fit the model or the source yields no batch. With no
    tensor to calibrate (no node of `op_types` has a float activation) nothing runs and the
    stats are empty: asking ONNX Runtime for no outputs would return all of them.
    """
    proto = onnx.shape_inference.infer_shapes(onnx.load(model, load_external_data=False))
    names = tensors if tensors is not None else select_activations(proto, op_types)
    if not names:
        return ActivationStats({}, 0)
    onnx.load_external_data_for_model(proto, str(model.parent))
    augmented = work_dir / "calibration_augmented.onnx"
    _save_with_outputs(proto, names, augmented)
    del proto
    try:
        return _stream(augmented, source, names, progress, max_batches, bins)
    finally:
        _remove_model(augmented)


def _save_with_outputs(model: onnx.ModelProto, names: list[str], path: Path) -> None:
    types = _elem_types(model.graph)
    present = {output.name for output in model.graph.output}
    for name in names:
        if name not in present:
            info = onnx.helper.make_tensor_value_info(name, types.get(name, 1), None)
            model.graph.output.append(info)
    external = sum(len(init.raw_data) for init in model.graph.initializer) > _EXTERNAL_DATA_BYTES
    onnx.save_model(model, path, save_as_external_data=external, location=f"{path.name}.data")


def _remove_model(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)


def _stream(
    augmented: Path,
    source: CalibrationSource,
    names: list[str],
    progress: ProgressCallback | None,
    max_batches: int | None,
    bins: int,
) -> ActivationStats:
    session = _session(augmented)
    inputs = [arg.name for arg in session.get_inputs()]
    collectors = {name: HistogramCollector(bins) for name in names}
    used = 0
    for used, batch in enumerate(itertools.islice(source.batches(), max_batches), start=1):
        outputs = _run_batch(session, inputs, batch, names, used)
        for name, values in zip(names, outputs, strict=True):
            collectors[name].update(values)
        del outputs
        if progress:
            fraction = min(1.0, used / max_batches) if max_batches else 0.0
            progress(fraction, f"calibration batch {used}")
    if used == 0:
        raise DataMismatch(
            f"The calibration data ({source.description}) yielded no batch.",
            hint="Give calibration data with at least one sample.",
        )
    logger.debug("calibrated %d tensors over %d batches", len(collectors), used)
    return ActivationStats(collectors, used)


def _session(path: Path) -> ort.InferenceSession:
    try:
        return reference_session(path)
    except Exception as exc:  # onnxruntime raises its own untyped Fail/InvalidGraph errors
        raise ModelLoadError(
            f"ONNX Runtime could not load the model for calibration: {exc}"
        ) from exc


def _run_batch(
    session: ort.InferenceSession,
    inputs: list[str],
    batch: Mapping[str, np.ndarray],
    names: list[str],
    number: int,
) -> list[np.ndarray]:
    missing = [name for name in inputs if name not in batch]
    if missing:
        raise DataMismatch(
            f"Calibration batch {number} lacks input(s) {', '.join(missing)}; "
            f"the model expects {', '.join(inputs)} and the batch has {', '.join(batch)}."
        )
    feed = {name: batch[name] for name in inputs}
    try:
        outputs: list[np.ndarray] = session.run(names, feed)
    except Exception as exc:  # onnxruntime raises its own untyped Fail/InvalidArgument errors
        raise DataMismatch(
            f"Calibration batch {number} does not fit the model: {exc}",
            hint="Check the batch's shapes and dtypes against the model's inputs.",
        ) from exc
    return outputs
