"""Fusion patterns written in Python by library users, registered in this process only.

A user pattern is a predicate over a node (`op_type`, `users`, `inputs`, `attributes`). It
matches a pair: a node the predicate accepts (the head) and the one node that uses the head's
outputs (its only user, which has one output; none of the head's outputs is a graph output).
The predicate is asked only about such heads, so `node.users[0]` is always there.
The pair is rewritten by the same machinery as the built-in rules: a RewriteRule, applied by the
rewriter's RewriteRuleSet, replaces the two nodes by what the fuse function builds.

The math is the fuse function's: `fuse(op, head)` returns the value that replaces the user's
output, built with the rewriter's `op` builder (for the head's Conv + Relu, e.g.
`op.FusedConv(*head.inputs, _domain="com.microsoft", activation="Relu", **head.attributes)`),
or None to leave that pair alone. Without one (a bare predicate) the pair is fused by the
built-in rule for its two op types, with that rule's own check and math (see patterns.py):
Conv→Relu and Conv→Clip become FusedConv, Conv→BatchNormalization a folded Conv, MatMul→Add a
Gemm, Transpose→Transpose and Reshape→Reshape one node. A bare predicate that accepts a pair of
other op types is an error naming the pair: give it a fuse function.

Registering under a name that is taken replaces that pattern in this process (a warning says
so); `unregister_fusion_pattern` puts it back. The server never runs any of this: it loads
patterns from installed entry points only, and uploaded Python is never executed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, overload

import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, PatternMatcher, RewriteRule
from pydantic import PrivateAttr

from optistudio.core.errors import InvalidSpec
from optistudio.core.fusion.registry import ANY_BACKEND, FusionPatternInfo, fusion_patterns
from optistudio.core.fusion.specs import (
    CONV_BN,
    CONV_CLIP,
    CONV_RELU,
    MATMUL_ADD_GEMM,
    RESHAPE_RESHAPE,
    TRANSPOSE_TRANSPOSE,
)

log = logging.getLogger(__name__)

BUILT_IN_REWRITES: dict[tuple[str, str], FusionPatternInfo] = {
    ("Conv", "Relu"): CONV_RELU,
    ("Conv", "Clip"): CONV_CLIP,
    ("Conv", "BatchNormalization"): CONV_BN,
    ("MatMul", "Add"): MATMUL_ADD_GEMM,
    ("Transpose", "Transpose"): TRANSPOSE_TRANSPOSE,
    ("Reshape", "Reshape"): RESHAPE_RESHAPE,
}
"""(head op, user op) -> the built-in pattern that fuses the pair of a bare predicate."""

BARE_BACKENDS = ["onnxruntime"]
"""Where a bare pattern's result runs: some built-in rewrites make ONNX Runtime's FusedConv."""

_ORDER_STEP = 10


class FusionNode:
    """What a user pattern sees of a graph node: its op type and users, inputs, attributes."""

    __slots__ = ("node",)

    def __init__(self, node: ir.Node) -> None:
        self.node = node

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def domain(self) -> str:
        return self.node.domain

    @property
    def name(self) -> str | None:
        return self.node.name

    @property
    def users(self) -> list[FusionNode]:
        """The nodes that read this node's outputs, each once (graph outputs are not users)."""
        return [FusionNode(user) for user in self.node.successors()]

    @property
    def inputs(self) -> list[ir.Value | None]:
        """The input values, to pass on to the `op` builder in a fuse function."""
        return list(self.node.inputs)

    @property
    def attributes(self) -> dict[str, Any]:
        """Attribute values by name, e.g. {'strides': [2, 2]}."""
        return {name: attr.value for name, attr in self.node.attributes.items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FusionNode) and other.node is self.node

    def __hash__(self) -> int:
        return id(self.node)

    def __repr__(self) -> str:
        return f"FusionNode({self.op_type} {self.name!r})"


Predicate = Callable[[FusionNode], bool]
Fuse = Callable[[Any, FusionNode], Any]
"""fuse(op, head) -> the value replacing the user's output (or a one-value list), or None."""


class UserFusionPattern(FusionPatternInfo):
    """A fusion pattern whose predicate (and fuse function) live in this process."""

    _predicate: Predicate = PrivateAttr()
    _fuse: Fuse | None = PrivateAttr(default=None)

    def rules(self) -> list[RewriteRule]:
        return [_UserRule(self.name, self._predicate, self._fuse)]


@overload
def register_fusion_pattern(predicate: Predicate, /) -> Predicate: ...


@overload
def register_fusion_pattern(
    *,
    name: str | None = None,
    fuse: Fuse | None = None,
    backends: list[str] | None = None,
    order: int | None = None,
) -> Callable[[Predicate], Predicate]: ...


def register_fusion_pattern(
    predicate: Predicate | None = None,
    /,
    *,
    name: str | None = None,
    fuse: Fuse | None = None,
    backends: list[str] | None = None,
    order: int | None = None,
) -> Predicate | Callable[[Predicate], Predicate]:
    """Register a predicate over a node as a fusion pattern of this process; use it bare
    (`@register_fusion_pattern`) or with options (`@register_fusion_pattern(fuse=...)`).

    The name is the function's unless `name` is given. Without `fuse`, the pair is fused by
    the built-in rule for its op types and the pattern targets ONNX Runtime (`backends`
    default); with `fuse`, every backend: its result is taken to be standard ONNX, so name the
    backends (e.g. ['onnxruntime']) for a fuse function that builds a contrib op. `order`
    places it among the patterns (default_order); by default it runs after all the others, or
    where the pattern it replaces ran. Returns the predicate unchanged.
    """

    def register(function: Predicate) -> Predicate:
        _register(function, name or function.__name__, fuse, backends, order)
        return function

    return register(predicate) if predicate is not None else register


def unregister_fusion_pattern(name: str) -> None:
    """Take back a pattern registered in this process, putting back the one it replaced."""
    pattern = fusion_patterns.find(name)
    if not isinstance(pattern, UserFusionPattern):
        raise InvalidSpec(f"{name!r} is not a fusion pattern registered in this process.")
    fusion_patterns.unregister(name)
    if replaced := _replaced.pop(name, None):
        fusion_patterns.register(replaced)


_replaced: dict[str, FusionPatternInfo] = {}
"""Patterns a user pattern of the same name replaced in this process, to put them back."""


def _register(
    predicate: Predicate,
    name: str,
    fuse: Fuse | None,
    backends: list[str] | None,
    order: int | None,
) -> None:
    previous = fusion_patterns.find(name)
    pattern = UserFusionPattern(
        name=name,
        label=f"{name} (user pattern)",
        description=_description(predicate, fuse),
        implementation=f"{predicate.__module__}:{predicate.__qualname__}",
        backends=backends or ([ANY_BACKEND] if fuse else list(BARE_BACKENDS)),
        default_order=order if order is not None else _default_order(previous),
    )
    pattern._predicate, pattern._fuse = predicate, fuse
    fusion_patterns.register(pattern)
    if previous is not None and not isinstance(previous, UserFusionPattern):
        log.warning("user fusion pattern %r replaces the registered one in this process", name)
        _replaced.setdefault(name, previous)


def _default_order(previous: FusionPatternInfo | None) -> int:
    if previous is not None:
        return previous.default_order
    return max((info.default_order for info in fusion_patterns), default=0) + _ORDER_STEP


def _description(predicate: Predicate, fuse: Fuse | None) -> str:
    doc = (predicate.__doc__ or "").strip().split("\n\n")[0]
    how = "its fuse function" if fuse else "the built-in rule for the pair's op types"
    where = f"{predicate.__module__}.{predicate.__qualname__}"
    said = (
        f"User pattern {where}: a node its predicate accepts and that node's only user, "
        f"fused by {how}. Registered in this process only."
    )
    return f"{doc} {said}" if doc else said


class _PairMatcher(PatternMatcher):
    """Matches at a node with one output whose input comes from a head the predicate accepts,
    when that node is the head's only user."""

    def __init__(self, pattern: Any, predicate: Predicate) -> None:
        super().__init__(pattern)
        self.predicate = predicate

    def match(
        self,
        model: ir.Model,
        graph_or_function: ir.Graph | ir.Function,
        node: ir.Node,
        *,
        verbose: int = 0,
        remove_nodes: bool = True,
        tracer: Any = None,
    ) -> MatchResult:
        result = MatchResult()
        heads = _heads(node) if len(node.outputs) == 1 else []
        head = next((head for head in heads if self.predicate(FusionNode(head))), None)
        if head is None:
            return result.fail("the predicate accepts no node whose only user is this one")
        result.add_node(head)
        result.add_node(node)
        result.bind("head", head)
        result.outputs.extend(node.outputs)
        return result


class _UserRule(RewriteRule):
    """A user pattern as a rewrite rule: the pair matcher, then `fuse` or the built-in rule."""

    def __init__(self, name: str, predicate: Predicate, fuse: Fuse | None) -> None:
        super().__init__(
            _pair_pattern,
            _fuse_replacement(fuse) if fuse else _never,
            matcher=lambda pattern: _PairMatcher(pattern, predicate),
            name=name,
        )
        self._bare = fuse is None
        self._built_in: dict[tuple[str, str], list[RewriteRule]] = {}

    def try_rewrite(
        self,
        model: ir.Model,
        graph_or_function: ir.Graph | ir.Function,
        node: ir.Node,
        *,
        verbose: int | None = None,
        tracer: Any = None,
    ) -> Any:
        if not self._bare:
            return super().try_rewrite(
                model, graph_or_function, node, verbose=verbose, tracer=tracer
            )
        match = self.match(model, graph_or_function, node, verbose=verbose, tracer=tracer)
        if not match:
            return None
        head = match.bindings["head"]
        for rule in self._built_in_rules(head, node):
            delta = rule.try_rewrite(model, graph_or_function, node, tracer=tracer)
            if delta is not None and head in delta.match.nodes:
                return delta
        return None

    def _built_in_rules(self, head: ir.Node, user: ir.Node) -> list[RewriteRule]:
        pair = (head.op_type, user.op_type)
        standard = {head.domain, user.domain} <= {"", "ai.onnx"}
        built_in = BUILT_IN_REWRITES.get(pair) if standard else None
        if built_in is None:
            known = ", ".join(f"{a}→{b}" for a, b in BUILT_IN_REWRITES)
            where = f" at node {head.name!r}" if head.name else ""
            raise InvalidSpec(
                f"Fusion pattern {self.name!r} accepted {head.op_type}→{user.op_type}{where}, "
                f"which no built-in rule fuses; those fuse {known}.",
                hint="Register it with fuse=..., a function that builds the fused node, or "
                "make the predicate accept only pairs a built-in rule fuses.",
            )
        if pair not in self._built_in:
            self._built_in[pair] = built_in.rules()
        return self._built_in[pair]


def _heads(node: ir.Node) -> list[ir.Node]:
    """The producers of `node`'s inputs whose outputs only `node` reads."""
    producers = [value.producer() for value in node.inputs if value is not None]
    return [
        head
        for head in dict.fromkeys(producer for producer in producers if producer is not None)
        if head is not node and _only_user(head, node)
    ]


def _only_user(head: ir.Node, node: ir.Node) -> bool:
    return all(
        not value.is_graph_output() and all(use.node is node for use in value.uses())
        for value in head.outputs
    )


def _pair_pattern(op: Any) -> Any:
    """Stands for the pair's output; the pair matcher does the matching."""
    return op.UserPair()


def _fuse_replacement(fuse: Fuse) -> Callable[..., Any]:
    def replacement(op: Any, head: ir.Node, **_: Any) -> Any:
        return fuse(op, FusionNode(head))

    return replacement


def _never(op: Any, **_: Any) -> None:
    """The replacement of a bare pattern, never called: the built-in rule rewrites."""
    return None
