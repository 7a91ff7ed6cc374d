"""Apply registered fusion patterns to a model file, in the order given, and check the result.

Each pattern runs as its own onnxscript RewriteRuleSet over the whole graph before the next one
starts, so the order is exactly the caller's. After a pattern has rewritten what it could, a dry
run with the rewriter's MatchingTracer collects the reasons its checks gave for the candidates
left, so a report can say why a pattern did not fire.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript.rewriter.pattern import MatchingTracer, MatchStatus, RewriteRuleSet
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import InvalidSpec, PassFailed
from optistudio.core.fusion.registry import FusionPatternInfo, fusion_patterns

logger = logging.getLogger(__name__)

_MAX_REASONS = 5
"""Refusal reasons kept per pattern: enough to explain, short enough for a report."""


class FusionResult(BaseModel):
    """What apply_fusions did to a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: Path
    matches: dict[str, int] = Field(description="Rewrites per pattern that ran, in order.")
    skipped: dict[str, str] = Field(description="Pattern -> why it did not run at all.")
    refused: dict[str, list[str]] = Field(
        default_factory=dict, description="Pattern -> reasons its check refused candidates."
    )


def apply_fusions(
    model: Path, out: Path, *, names: list[str], target_backend: str = "onnxruntime"
) -> FusionResult:
    """Apply the named patterns in order and write the fused model to `out`.

    Patterns without a kernel for `target_backend` are skipped with a reason. Raises UnknownName
    (listing the valid names) before touching the model, InvalidSpec for a name given twice, and
    PassFailed when the result fails the ONNX checker.
    """
    infos = _lookup(names)
    graph_model = _load(Path(model))
    matches: dict[str, int] = {}
    skipped: dict[str, str] = {}
    refused: dict[str, list[str]] = {}
    for info in infos:
        if not info.supports(target_backend):
            skipped[info.name] = f"no fused kernel on {target_backend}"
            continue
        rules = RewriteRuleSet(info.rules())
        matches[info.name] = rules.apply_to_model(graph_model)
        if reasons := _refusals(rules, graph_model):
            refused[info.name] = reasons
        logger.info("fusion %s: %d match(es)", info.name, matches[info.name])
    _save(graph_model, Path(out))
    _check(Path(out), [name for name, count in matches.items() if count])
    return FusionResult(output=Path(out), matches=matches, skipped=skipped, refused=refused)


def numerical_check(
    parent: Path, child: Path, *, feeds: dict[str, Any], atol: float = 1e-4, rtol: float = 1e-3
) -> float:
    """The largest absolute output difference between two models under ONNX Runtime (CPU).

    Graph optimizations are off, so the models are compared as written. Raises PassFailed,
    naming the output, when any element differs by more than atol + rtol * |parent|.
    """
    expected, actual = _run(Path(parent), feeds, "original"), _run(Path(child), feeds, "fused")
    worst = 0.0
    for name, want in expected.items():
        got = actual.get(name)
        if got is None or got.shape != want.shape:
            found = "is missing" if got is None else f"has shape {list(got.shape)}"
            raise PassFailed(f"Output {name!r} {found} after fusion (was {list(want.shape)}).")
        worst = max(worst, _check_close(name, want, got, atol, rtol))
    return worst


def _lookup(names: list[str]) -> list[FusionPatternInfo]:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidSpec(f"Fusion pattern(s) listed more than once: {', '.join(repeated)}.")
    return [fusion_patterns.get(name) for name in names]


def _refusals(rules: RewriteRuleSet, model: ir.Model) -> list[str]:
    tracer = MatchingTracer()
    rules.apply_to_model(model, tracer=tracer)  # with a tracer nothing is rewritten
    reasons = [
        match.match_result.reason
        for matches in tracer.best_matches_map.values()
        for match in matches
        if match.status == MatchStatus.CONDITION_FAILED and match.match_result.reason
    ]
    return list(dict.fromkeys(reasons))[:_MAX_REASONS]


def _load(path: Path) -> ir.Model:
    model = ir.load(path)
    # Checks read ranks and dtypes of intermediate values, so infer them first.
    return common_passes.ShapeInferencePass(strict_mode=False)(model).model


def _save(model: ir.Model, out: Path) -> None:
    for cleanup in (common_passes.RemoveUnusedNodesPass(), common_passes.RemoveUnusedOpsetsPass()):
        model = cleanup(model).model
    external = any(
        isinstance(value.const_value, ir.ExternalTensor) for value in _initializers(model)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    ir.save(model, out, external_data=f"{out.name}.data" if external else None)


def _initializers(model: ir.Model) -> list[ir.Value]:
    return list(model.graph.initializers.values())


def _check(out: Path, fired: list[str]) -> None:
    try:
        onnx.checker.check_model(str(out))
    except onnx.checker.ValidationError as exc:
        raise PassFailed(
            f"The fused model fails the ONNX checker: {exc}",
            hint=f"Run again without the patterns that fired: {', '.join(fired) or 'none'}.",
        ) from exc


def _run(path: Path, feeds: dict[str, Any], role: str) -> dict[str, np.ndarray]:
    try:
        session = reference_session(path)
        names = [output.name for output in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise PassFailed(f"The {role} model does not run under ONNX Runtime: {exc}") from exc


def _check_close(name: str, want: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> float:
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    close = np.isclose(got64, want64, atol=atol, rtol=rtol, equal_nan=True)
    diff = np.abs(got64 - want64)
    worst = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else 0.0
    if not close.all():
        raise PassFailed(
            f"Output {name!r} differs after fusion by up to {worst:.3g} "
            f"(tolerance atol={atol:g}, rtol={rtol:g}).",
            hint="Run again without the pattern that changed the numbers.",
        )
    return worst
