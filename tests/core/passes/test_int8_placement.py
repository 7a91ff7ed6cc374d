"""int8_placed's decision, given times: which nodes keep INT8, and when the pass refuses."""

from __future__ import annotations

import pytest

from optistudio.core.passes.placement import NodeCost, place_int8, refusal


def cost(name: str, fp32: float, int8: float, producer: str | None = None, op: str = "Conv"):
    return NodeCost(name=name, op_type=op, fp32_us=fp32, int8_us=int8, producer=producer)


@pytest.mark.parametrize(
    ("fp32", "int8", "keeps"),
    [
        pytest.param(100.0, 50.0, True, id="twice-as-fast"),
        pytest.param(100.0, 89.9, True, id="just-past-the-margin"),
        pytest.param(100.0, 90.0, False, id="at-the-margin"),
        pytest.param(100.0, 120.0, False, id="slower"),
        pytest.param(0.0, 5.0, False, id="fused-away-in-fp32-only"),
    ],
)
def test_a_node_keeps_int8_only_when_it_beats_fp32_by_the_margin(
    fp32: float, int8: float, keeps: bool
) -> None:
    costs = [cost("a", fp32, int8), cost("anchor", 100.0, 10.0)]

    placement = place_int8(costs, margin=0.1)

    assert ("a" in placement.int8) is keeps
    assert ("a" in placement.fp32) is not keeps


def test_an_unmeasured_node_follows_the_candidate_producing_its_input() -> None:
    costs = [
        cost("conv1", 100.0, 40.0),
        cost("relu1", 0.0, 0.0, producer="conv1", op="Relu"),
        cost("conv2", 100.0, 150.0, producer="relu1"),
        cost("relu2", 0.0, 0.0, producer="conv2", op="Relu"),
        cost("orphan", 0.0, 0.0, op="Relu"),
    ]

    placement = place_int8(costs, margin=0.1)

    assert placement.int8 == ["conv1", "relu1", "orphan"]
    assert placement.fp32 == ["conv2", "relu2"]
    assert (placement.measured, placement.paying) == (2, 1)
    assert placement.fp32_op_types == {"Conv": 1, "Relu": 1}


def test_an_activation_fused_in_int8_is_weighed_with_its_producer() -> None:
    costs = [
        cost("fc", 100.0, 200.0, op="MatMul"),
        cost("relu", 18.0, 0.0, producer="fc", op="Relu"),  # its own FP32 time, none in INT8
        cost("fc2", 100.0, 40.0, producer="relu", op="MatMul"),
    ]

    placement = place_int8(costs, margin=0.1)

    assert placement.fp32 == ["fc", "relu"]
    assert placement.int8 == ["fc2"]


def test_a_follower_s_int8_cost_counts_against_its_group() -> None:
    costs = [
        cost("conv", 100.0, 85.0),
        cost("pool", 0.0, 10.0, producer="conv", op="MaxPool"),  # fused in FP32 only
        cost("anchor", 100.0, 10.0),
    ]

    placement = place_int8(costs, margin=0.1)

    assert placement.fp32 == ["conv", "pool"]


def test_a_producer_cycle_ends_in_int8_rather_than_looping() -> None:
    costs = [cost("a", 0.0, 0.0, producer="b"), cost("b", 0.0, 0.0, producer="a")]

    assert place_int8(costs, margin=0.1).int8 == ["a", "b"]


def test_the_note_counts_the_nodes_and_names_the_op_types_left_in_fp32() -> None:
    costs = [
        cost("conv", 100.0, 40.0),
        cost("add1", 10.0, 20.0, op="Add"),
        cost("add2", 10.0, 20.0, op="Add"),
        cost("pool", 10.0, 30.0, op="MaxPool"),
    ]

    note = place_int8(costs, margin=0.1).note()

    assert note.startswith("INT8 kept on 1 of 4 quantized nodes")
    assert "10% faster than FP32 at one thread" in note
    assert note.endswith("FP32 on 3: Add 2, MaxPool 1.")


@pytest.mark.parametrize(
    ("costs", "said"),
    [
        pytest.param(
            [cost("a", 100.0, 100.0), cost("b", 50.0, 80.0)],
            "was not 10% faster than FP32 on any of its 2 timed quantized nodes",
            id="none-pays",
        ),
        pytest.param(
            [cost("a", 100.0, 10.0), cost("r", 0.0, 0.0, producer="a", op="Relu")],
            "INT8 paid on every one of its 2 quantized nodes, so the variant would be "
            "int8_static's",
            id="all-pay",
        ),
        pytest.param(
            [cost("a", 0.0, 0.0), cost("b", 0.0, 0.0)],
            "none of its 2 quantized nodes had a time of its own",
            id="nothing-timed",
        ),
    ],
)
def test_the_pass_refuses_with_a_sentence_when_the_variant_adds_nothing(
    costs: list[NodeCost], said: str
) -> None:
    why = refusal(place_int8(costs, margin=0.1))

    assert why is not None and said in why


def test_a_split_placement_is_not_refused() -> None:
    placement = place_int8([cost("a", 100.0, 10.0), cost("b", 100.0, 200.0)], margin=0.1)

    assert refusal(placement) is None


def test_a_negative_time_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="fp32_us"):
        NodeCost(name="a", op_type="Conv", fp32_us=-1.0, int8_us=0.0)
