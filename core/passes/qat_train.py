"""The fine-tuning loop of quantization-aware training: epochs of mini-batch steps on the
fake-quantized module, a validation metric after each epoch, early stopping on it.

Loss: with labels, cross-entropy of the judged output (log of it when the model already ends in
Softmax); without, distillation: the mean squared difference from the FP32 model's output on the
same inputs (computed once, before fake quantization). Validation (a held-out share of the
training data, never the evaluation data): top-1 with labels (ties go to the lower validation
loss), the distillation loss without.
The best epoch's weights and ranges are kept; epoch 0 is the fake-quantized model before any
step, so training can only improve on post-training quantization as validation sees it.
Progress is reported every step, and a callback that raises Cancelled stops between steps.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from optistudio.core.errors import PassFailed
from optistudio.core.passes.qat_fakequant import set_observing
from optistudio.core.passes.qat_history import history_line
from optistudio.core.progress import ProgressCallback
from optistudio.core.torch_bridge.module import OnnxModule

LossKind = Literal["cross_entropy", "nll", "distillation"]


@dataclass
class TrainingArrays:
    """Inputs (in the module's input order), labels or FP32 targets, split by index."""

    inputs: list[np.ndarray]
    labels: np.ndarray | None
    targets: np.ndarray | None
    train: np.ndarray
    val: np.ndarray
    device: str = "cpu"

    def batch(self, index: np.ndarray) -> tuple[list[torch.Tensor], torch.Tensor]:
        xs = [self._tensor(x[index]) for x in self.inputs]
        wanted = self.labels if self.labels is not None else self.targets
        assert wanted is not None
        return xs, self._tensor(wanted[index])

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)


def training_device(wanted: str) -> str:
    """'cuda' or 'cpu' for the config's device ('auto': the GPU when torch sees one)."""
    cuda = torch.cuda.is_available()
    if wanted == "cuda" and not cuda:
        raise PassFailed(
            "Quantization-aware training was asked to train on a GPU (device cuda), and this "
            "worker's torch sees none.",
            hint="Leave the device on auto, or run the job on a worker with a CUDA GPU and a "
            "CUDA build of torch.",
        )
    return "cuda" if wanted == "cuda" or (wanted == "auto" and cuda) else "cpu"


@dataclass
class TrainSettings:
    epochs: int
    batch_size: int
    learning_rate: float
    patience: int
    max_seconds: float
    observe_epochs: int
    output_index: int
    loss: LossKind
    seed: int = 0


@dataclass
class TrainingOutcome:
    losses: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    best_epoch: int = 0
    stopped: str = "epochs"
    seconds: float = 0.0
    steps: int = 0


def metric_name(loss: LossKind) -> str:
    return "distillation loss" if loss == "distillation" else "top-1"


def better(loss: LossKind, new: tuple[float, float], old: tuple[float, float]) -> bool:
    """(metric, validation loss) pairs: top-1 decides, its ties go to the lower loss."""
    if loss == "distillation":
        return new[0] < old[0]
    return new[0] > old[0] or (new[0] == old[0] and new[1] < old[1])


def fine_tune(
    module: OnnxModule, data: TrainingArrays, settings: TrainSettings, progress: ProgressCallback
) -> TrainingOutcome:
    """Train `module` in place and leave it holding the best epoch's state."""
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=settings.learning_rate)
    scores = [evaluate(module, data, settings)]
    outcome = TrainingOutcome(val=[scores[0][0]])
    best_state, since_best = copy.deepcopy(module.state_dict()), 0
    started = time.monotonic()
    name = metric_name(settings.loss)
    for epoch in range(1, settings.epochs + 1):
        set_observing(module, epoch <= settings.observe_epochs)
        loss, finished = _epoch(
            module,
            optimizer,
            data,
            settings,
            rng,
            _reporter(progress, epoch, settings, outcome, started),
        )
        outcome.steps += finished[0]
        if not finished[1]:
            outcome.stopped = "time limit"
            if finished[0] == 0:
                break
        outcome.losses.append(loss)
        scores.append(evaluate(module, data, settings))
        outcome.val.append(scores[-1][0])
        if better(settings.loss, scores[-1], scores[outcome.best_epoch]):
            outcome.best_epoch, since_best = epoch, 0
            best_state = copy.deepcopy(module.state_dict())
        else:
            since_best += 1
        progress(
            epoch / settings.epochs,
            history_line(epoch, settings.epochs, outcome.losses, name, outcome.val),
        )
        if outcome.stopped == "time limit":
            break
        if since_best >= settings.patience:
            outcome.stopped = "early stopping"
            break
    set_observing(module, False)
    module.load_state_dict(best_state)
    outcome.seconds = time.monotonic() - started
    return outcome


def _reporter(
    progress: ProgressCallback,
    epoch: int,
    settings: TrainSettings,
    outcome: TrainingOutcome,
    started: float,
):  # type: ignore[no-untyped-def]
    name = metric_name(settings.loss)

    def report(step: int, steps: int) -> bool:
        """Report the step; False once the time limit has passed."""
        line = history_line(epoch, settings.epochs, outcome.losses, name, outcome.val)
        progress(((epoch - 1) + step / steps) / settings.epochs, f"step {step}/{steps} of {line}")
        return time.monotonic() - started < settings.max_seconds

    return report


def _epoch(module, optimizer, data, settings, rng, report) -> tuple[float, tuple[int, bool]]:  # type: ignore[no-untyped-def]
    """One pass over the shuffled training split; (mean loss, (steps done, within time))."""
    module.train()
    order = rng.permutation(data.train)
    batches = [
        order[i : i + settings.batch_size] for i in range(0, len(order), settings.batch_size)
    ]
    total, done = 0.0, 0
    for step, index in enumerate(batches, start=1):
        if not report(step - 1, len(batches)):
            return total / max(done, 1), (done, False)
        xs, wanted = data.batch(index)
        optimizer.zero_grad()
        loss = _loss(module(*xs)[settings.output_index], wanted, settings.loss)
        loss.backward()
        optimizer.step()
        total, done = total + float(loss.detach()), done + 1
    module.eval()
    return total / max(done, 1), (done, True)


def _loss(output: torch.Tensor, wanted: torch.Tensor, kind: LossKind) -> torch.Tensor:
    if kind == "distillation":
        return F.mse_loss(output, wanted)
    logits = output.reshape(output.shape[0], -1)
    if kind == "nll":
        return F.nll_loss(torch.log(logits.clamp_min(1e-12)), wanted.long())
    return F.cross_entropy(logits, wanted.long())


@torch.no_grad()
def evaluate(
    module: OnnxModule, data: TrainingArrays, settings: TrainSettings
) -> tuple[float, float]:
    """(metric, loss) on the held-out split: (top-1, task loss) with labels, (distillation
    loss, the same) without."""
    module.eval()
    hits, loss_sum, count = 0.0, 0.0, 0
    for start in range(0, len(data.val), settings.batch_size):
        index = data.val[start : start + settings.batch_size]
        xs, wanted = data.batch(index)
        output = module(*xs)[settings.output_index]
        loss_sum += float(_loss(output, wanted, settings.loss)) * len(index)
        if settings.loss != "distillation":
            hits += float((output.reshape(len(index), -1).argmax(1) == wanted.long()).sum())
        count += len(index)
    loss = loss_sum / max(count, 1)
    return (loss if settings.loss == "distillation" else hits / max(count, 1)), loss


@torch.no_grad()
def teacher_outputs(
    module: OnnxModule, inputs: list[np.ndarray], output_index: int, batch: int
) -> np.ndarray:
    """The FP32 module's output `output_index` on every sample (distillation targets)."""
    module.eval()
    found = []
    for start in range(0, len(inputs[0]), batch):
        xs = [torch.from_numpy(np.ascontiguousarray(x[start : start + batch])) for x in inputs]
        found.append(module(*xs)[output_index].numpy())
    return np.concatenate(found)
