"""Models already on the workers' shared storage: which paths the studio may read, and which
models lie there.

The operator names the folders (OPTISTUDIO_MODEL_ROOTS); nothing else on the server is read.
A path given by a user is taken with its symbolic links resolved and must then lie under one of
those roots; every file the model brings (its graph, the configs and tokenizer beside a decoder)
must, links resolved, lie inside the model's own folder. A path outside gets one sentence,
the same whether or not anything exists there, so the answer is never an existence oracle
for the rest of the server. Nothing here reads a model: intake checks it as it checks an upload
(catalog.add_from_storage).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from optistudio.core.errors import InvalidSpec, ModelRejected
from optistudio.core.llm.configs import CONFIG_FILES
from optistudio.core.llm.folder import TOKENIZER_FILES, decoder_path
from optistudio.services.settings import Settings

ROOTS_ENV = "OPTISTUDIO_MODEL_ROOTS"
LISTED_AT_MOST = 500
"""Models the listing shows; a root holding more is cut there (the path can still be typed)."""
LISTING_DEPTH = 4
"""Folders below a root the listing walks."""
SIDE_FILES = (*CONFIG_FILES, *TOKENIZER_FILES, "generation_config.json")
OUTSIDE_ROOTS = "That path is not a model inside the folders this studio may add models from."


def roots_hint(settings: Settings) -> str:
    roots = ", ".join(str(root) for root in settings.model_root_paths)
    return f"Give a path under {roots} (the operator's {ROOTS_ENV})."


def feature_off() -> ModelRejected:
    return ModelRejected(
        "Adding models from shared storage is off on this studio.",
        hint=f"The operator turns it on by setting {ROOTS_ENV} to the folders the workers share.",
    )


def storage_model(settings: Settings, given: str) -> Path:
    """The graph of the model at `given` (an .onnx file or a model's folder), symbolic links
    resolved, once it and the files beside it lie inside a model root; ModelRejected with one
    sentence otherwise."""
    roots = settings.model_root_paths
    if not roots:
        raise feature_off()
    folder_or_file = _inside(roots, given)
    if folder_or_file is None:
        raise ModelRejected(OUTSIDE_ROOTS, hint=roots_hint(settings))
    try:
        graph = decoder_path(folder_or_file)
    except InvalidSpec as exc:
        raise ModelRejected(exc.message, hint=exc.hint) from None
    resolved = graph.resolve()
    if _root_of(roots, resolved) is None or not resolved.is_file():
        raise ModelRejected(OUTSIDE_ROOTS, hint=roots_hint(settings))
    _check_side_files(resolved.parent)
    return resolved


def _inside(roots: list[Path], given: str) -> Path | None:
    """`given` resolved, when it exists under a root; a relative path is read from each root."""
    text = given.strip()
    if not text or "\x00" in text:
        return None
    path = Path(text).expanduser()
    candidates = [path] if path.is_absolute() else [root / path for root in roots]
    for candidate in candidates:
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError, ValueError):  # a link loop, a name the system refuses
            continue
        if _root_of(roots, resolved) is not None and resolved.exists():
            return resolved
    return None


def _root_of(roots: list[Path], resolved: Path) -> Path | None:
    return next((root for root in roots if resolved.is_relative_to(root)), None)


def _check_side_files(folder: Path) -> None:
    """Refuse a config or tokenizer file beside the graph that leads out of its folder."""
    for name in SIDE_FILES:
        side = folder / name
        if side.is_symlink() and not side.resolve().is_relative_to(folder):
            raise ModelRejected(
                f"The model's {name} is a link to a file outside its folder; only files inside "
                "the folder are read.",
                hint=f"Copy {name} into the model's folder in place of the link.",
            )


def models_under_roots(settings: Settings) -> list[str]:
    """Paths of the models under the roots (.onnx files, decoder folders as their folder),
    sorted, at most LISTED_AT_MOST; links leading out of a root are not followed."""
    found: list[str] = []
    for root in settings.model_root_paths:
        for path in _candidates(root):
            found.append(str(path))
            if len(found) >= LISTED_AT_MOST:
                return sorted(found)
    return sorted(found)


def _candidates(root: Path) -> Iterator[Path]:
    """.onnx files under `root` (LISTING_DEPTH deep), a folder with genai_config.json once."""
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < LISTING_DEPTH else []
        if "genai_config.json" in files and here != root:
            yield here
            continue
        for name in sorted(files):
            path = here / name
            if name.endswith(".onnx") and path.resolve().is_relative_to(root):
                yield path
