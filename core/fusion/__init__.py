"""Operator fusion: registered rewrite patterns (onnxscript's rewriter) applied in an explicit order.

Importing this package is cheap: the pattern specs carry names, descriptions and backends; the
rewriter itself (onnxscript) is imported only when patterns are applied.
"""

from __future__ import annotations

from optistudio.core.fusion.registry import FusionPatternInfo, fusion_patterns

__all__ = ["FusionPatternInfo", "fusion_patterns"]
