"""Specs of the built-in fusion patterns, registered through entry points like any plug-in.

`default_order` puts clean-ups first (they expose longer chains), then folding (Conv+BN must become
one Conv before an activation can join it), then the fusions into backend-specific kernels.
"""

from __future__ import annotations

from optistudio.core.fusion.registry import ANY_BACKEND, FusionPatternInfo

_RULES = "optistudio.core.fusion.patterns"

TRANSPOSE_TRANSPOSE = FusionPatternInfo(
    name="transpose_transpose",
    label="Transpose + Transpose",
    description=(
        "Replaces two consecutive Transposes with one whose permutation is their composition, "
        "and removes both when they cancel out. Each Transpose copies the whole tensor in a "
        "new memory order, so one copy (or none) is saved per pair."
    ),
    implementation=f"{_RULES}:transpose_transpose",
    backends=[ANY_BACKEND],
    default_order=10,
)

RESHAPE_RESHAPE = FusionPatternInfo(
    name="reshape_reshape",
    label="Reshape + Reshape",
    description=(
        "Replaces a Reshape of a Reshape by a single Reshape to the final shape, when that "
        "shape is a constant that does not copy dims (0) from the intermediate result. Saves a "
        "node and, on runtimes that copy on reshape, a copy of the tensor."
    ),
    implementation=f"{_RULES}:reshape_reshape",
    backends=[ANY_BACKEND],
    default_order=20,
)

CONV_BN = FusionPatternInfo(
    name="conv_bn",
    label="Conv + BatchNormalization",
    description=(
        "Folds an inference-mode BatchNormalization with constant statistics into the weights "
        "and bias of the Conv before it. The normalization is a per-channel scale and shift, "
        "which a Conv can absorb, so a full pass over the activation tensor disappears."
    ),
    implementation=f"{_RULES}:conv_bn",
    backends=[ANY_BACKEND],
    default_order=30,
)

MATMUL_ADD_GEMM = FusionPatternInfo(
    name="matmul_add_gemm",
    label="MatMul + Add → Gemm",
    description=(
        "Turns a 2-D MatMul by a constant matrix followed by the addition of a constant bias "
        "vector into one Gemm. The GEMM kernel adds the bias while it writes its output, "
        "instead of reading and writing the whole result a second time."
    ),
    implementation=f"{_RULES}:matmul_add_gemm",
    backends=[ANY_BACKEND],
    default_order=40,
)

CONV_RELU = FusionPatternInfo(
    name="conv_relu",
    label="Conv + Relu → FusedConv",
    description=(
        "Replaces a float32 Conv followed by Relu with ONNX Runtime's com.microsoft FusedConv, "
        "which applies the activation to each output as the convolution produces it, saving "
        "a pass over the activation tensor. Only ONNX Runtime has this kernel."
    ),
    implementation=f"{_RULES}:conv_relu",
    backends=["onnxruntime"],
    default_order=50,
)

CONV_CLIP = FusionPatternInfo(
    name="conv_clip",
    label="Conv + Clip → FusedConv",
    description=(
        "Replaces a float32 Conv followed by Clip with constant bounds (ReLU6 and friends) "
        "with ONNX Runtime's com.microsoft FusedConv(activation='Clip'), which clamps each "
        "output as the convolution produces it. Only ONNX Runtime has this kernel."
    ),
    implementation=f"{_RULES}:conv_clip",
    backends=["onnxruntime"],
    default_order=60,
)

BUILTIN_PATTERNS: tuple[FusionPatternInfo, ...] = (
    TRANSPOSE_TRANSPOSE,
    RESHAPE_RESHAPE,
    CONV_BN,
    MATMUL_ADD_GEMM,
    CONV_RELU,
    CONV_CLIP,
)
