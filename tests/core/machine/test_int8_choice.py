"""INT8 weights follow the CPU: 7-bit on x86 without VNNI/AMX (ONNX Runtime's guidance against
saturating u8 x s8 kernels), 8-bit where 8-bit dot products go straight to int32."""

from __future__ import annotations

import pytest

from optistudio.core.machine.environment import INT8_DOT_PRODUCT_FLAGS, int8_choice, isa_flags

AVX2 = ["sse4_2", "fma", "f16c", "avx", "avx2"]


@pytest.mark.parametrize(
    ("flags", "reduce_range", "label", "named"),
    [
        (AVX2, True, "7-bit weights (no VNNI/AMX)", "no VNNI/AMX"),
        ([*AVX2, "avx512f", "avx512_vnni"], False, "8-bit weights (AVX512-VNNI)", "AVX512-VNNI"),
        ([*AVX2, "avx_vnni"], False, "8-bit weights (AVX-VNNI)", "AVX-VNNI"),
        ([*AVX2, "avx512f", "amx_int8"], False, "8-bit weights (AMX-INT8)", "AMX-INT8"),
        (["asimd", "asimddp"], False, "8-bit weights (not x86)", "not x86"),
        ([], False, "8-bit weights (CPU flags unknown)", "could not be read"),
    ],
    ids=["avx2-only", "avx512-vnni", "avx-vnni", "amx", "arm", "unknown"],
)
def test_the_weight_range_follows_the_flags(
    flags: list[str], reduce_range: bool, label: str, named: str
) -> None:
    choice = int8_choice(flags)

    assert choice.reduce_range is reduce_range
    assert choice.weights == ("7-bit" if reduce_range else "8-bit")
    assert choice.label() == label
    assert named in choice.reason
    assert choice.sentence().startswith(
        "INT8 weights 7-bit (reduce_range): " if reduce_range else "INT8 weights 8-bit: "
    )


def test_each_flag_is_reported_present_or_not() -> None:
    choice = int8_choice([*AVX2, "avx_vnni", "amx_int8"])

    assert (choice.vnni, choice.avx_vnni, choice.avx512_vnni, choice.amx_int8) == (
        True,
        True,
        False,
        True,
    )
    assert choice.x86 and choice.flags_read


def test_this_machine_is_decided_by_its_own_flags() -> None:
    """Whichever CI machine runs this (AVX2 only; AVX-512 VNNI; AMX), its choice follows its
    flags: 7 bits on x86 without 8-bit dot products, 8 bits with them."""
    flags = isa_flags()
    choice = int8_choice()

    assert choice == int8_choice(flags)
    dot_products = set(flags) & set(INT8_DOT_PRODUCT_FLAGS)
    x86_without_dot_products = "avx2" in flags and not dot_products
    assert choice.reduce_range is x86_without_dot_products
    assert choice.vnni is bool(dot_products & {"avx512_vnni", "avx_vnni"})
    assert choice.amx_int8 is ("amx_int8" in flags)
    if x86_without_dot_products:
        assert choice.label() == "7-bit weights (no VNNI/AMX)"
    elif dot_products:
        assert choice.label().startswith("8-bit weights (") and "no VNNI" not in choice.label()
