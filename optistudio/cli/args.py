"""Argument parsing helpers shared by the `optistudio` subcommands.

The input flags are one parser for every command that runs a model (`add_input_flags`):
`--shape NAME=D1,D2,...` (a full shape, used exactly), `--dim NAME=N` (a named dynamic dim),
`--value NAME=NUMBER` (fills an input, e.g. a sample rate; `NAME=@FILE.npz`: a small array,
one request's value), `--batch-axis NAME=K|none` (an input's batch axis where the inferred one
is wrong: a state [layers, batch, hidden] is state=1), `--inputs FILE.npz` (arrays by
input name, used as given; their shapes become the shapes) and `--free-dims` (the command
runs a checked copy of the model file with the declared dims freed that the shapes ask
otherwise, or every dim the graph does not need: `optistudio.core.passes.free_dims`). They are
read as text and checked by `input_options`, so a bad one is an expected failure that names
the flag and the form, also under --json.

A command on a model file (`args.model`) runs where the flags leave sizes free at the file's
proposed input profile (`propose_profile`), checked by one run and corrected where a guess did
not run (`check_profile`), applied under the flags as a worker applies a stored profile
(`InputProfile.under`): no dim falls back to a hidden default. What it ran at goes to stderr in
one line (never into --json's stdout) and, for a command's JSON, `resolved_inputs(args)`.
"""

from __future__ import annotations

import argparse
import math
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.data.npy_headers import ArrayHeader, checked_npz_headers
from optistudio.core.errors import DataMismatch, InvalidSpec

T = TypeVar("T")


def parse_int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_core_list(text: str) -> list[int]:
    try:
        cores = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}") from None
    if not cores or min(cores) < 0:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}")
    return cores


def parse_float_list(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers like 0.5,0.5,0.5 got {text!r}"
        ) from None


class InputOptions(ModelInputs):
    """What the input flags said: the inputs every model-running spec embeds (ModelInputs),
    and the check the sizes they left free came from."""

    resolved: Any = None
    """The ProfileCheck the sizes left free came from (None: the flags gave them all)."""

    def full_shapes(self) -> dict[str, list[int]]:
        """Each input's full shape: the one the check ran at, under the flags' own shapes."""
        ran = self.resolved.shapes if self.resolved is not None else {}
        return {**ran, **self.shapes}

    def fields(self) -> dict[str, Any]:
        """The spec fields: shapes, dims, values, inputs_file and batch_axes."""
        return {name: getattr(self, name) for name in ModelInputs.FIELDS}


def add_input_flags(parser: argparse.ArgumentParser, *, request: bool = False) -> None:
    """--shape, --dim, --value and --inputs on `parser` (`request`: they describe one request
    of a batching server, whose batch is formed by stacking requests)."""
    what = "one request's" if request else "an input's"
    add = parser.add_argument
    add(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help=f"{what} full shape, used exactly (repeatable), e.g. input=1,3,224,224; "
        "batch sizes apply to the inputs without one",
    )
    add(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=N",
        help="size of a named dynamic dim, or INPUT.INDEX (repeatable), e.g. sequence=128",
    )
    add(
        "--value",
        action="append",
        default=[],
        metavar="NAME=NUMBER",
        help="fill an input with a value (repeatable), e.g. sr=16000; NAME=@FILE.npz for a "
        "small array (one request's value, the array named NAME or the file's only one)",
    )
    add(
        "--batch-axis",
        action="append",
        default=[],
        metavar="NAME=K|none",
        help="an input's batch axis where the inferred one is wrong (repeatable), e.g. "
        "state=1 for a state [layers, batch, hidden]; none: no batch axis",
    )
    add(
        "--free-dims",
        action="store_true",
        help="run a copy of the model with the declared dims the graph does not need freed "
        "(those --shape asks otherwise, else all it can run without), checked first: equal "
        "to the file at its declared sizes and run at two others",
    )
    add(
        "--inputs",
        type=Path,
        metavar="FILE.npz",
        help=f"{what.replace('an input', 'the inputs')} arrays by input name, used as given "
        "(their shapes become the shapes)",
    )


def input_options(args: argparse.Namespace, *, resolve: bool = True) -> InputOptions:
    """The input flags of `args`, checked; InvalidSpec names a bad flag and its form. For a
    command on a model file, the sizes they leave free come from its checked proposal
    (`resolve=False`: not, e.g. when calibration data's shapes decide them)."""
    given = _given_options(args)
    if getattr(args, "free_dims", False) and _model_file(args):
        _run_freed(args, given)
    if not resolve or given.inputs_file or not _model_file(args):
        return given
    cached: InputOptions | None = getattr(args, "_input_options", None)
    if cached is None:  # a command may build several specs (bench --backend all): check once
        cached = _resolved(args.model, given)
        args._input_options = cached
    return cached


def resolved_inputs(args: argparse.Namespace) -> dict[str, Any] | None:
    """What the command ran the model at and how (for its JSON), once `input_options` ran;
    with --free-dims also the freed copy it ran (`freed_dims`: path and line)."""
    options = getattr(args, "_input_options", None)
    freed = getattr(args, "_freed_dims", None)
    if options is None or options.resolved is None or not options.resolved.guesses:
        return {"freed_dims": freed} if freed else None
    summary = cast(dict[str, Any], options.resolved.summary())
    return summary | {"freed_dims": freed} if freed else summary


def _run_freed(args: argparse.Namespace, given: InputOptions) -> None:
    """--free-dims: `args.model` becomes the checked copy with the declared dims freed that
    the shapes asked otherwise (none asked: every dim the graph does not need), once per
    command; one line on stderr says so (never into --json's stdout)."""
    from optistudio.core.passes.free_dims import freed_copy

    if getattr(args, "_freed_dims", None):
        return
    original = args.model
    args.model, line = freed_copy(original, shapes=given.shapes or None, dims=given.dims)
    args._freed_dims = {"original": str(original), "path": str(args.model), "line": line}
    print(f"free dims: {line}", file=sys.stderr)


def _model_file(args: argparse.Namespace) -> bool:
    model = getattr(args, "model", None)
    return isinstance(model, Path) and model.is_file()


def _resolved(model: Path, given: InputOptions) -> InputOptions:
    """`given` with the model's checked proposal under it; one line on stderr says where it
    ran (nothing when the model and the flags fix every size)."""
    from optistudio.core.data.input_profile import propose_input_profile
    from optistudio.core.data.probe import check_profile
    from optistudio.core.model.intake import inspect_model

    info = inspect_model(model)
    proposal = propose_input_profile(info.inputs, metadata_keys=info.metadata_keys)
    check = check_profile(model, info, proposal, given=given)
    if check.guesses:
        print(f"inputs: {check.line()}", file=sys.stderr)
    return given.over(check.profile, info.inputs).model_copy(update={"resolved": check})


def _given_options(args: argparse.Namespace) -> InputOptions:
    """The input flags exactly as given."""
    from optistudio.core.data.input_profile import parse_batch_axes

    shapes = _assignments("--shape", args.shape, _sizes, "NAME=D1,D2,...", "input=1,3,224,224")
    dims = _assignments("--dim", args.dim, _size, "NAME=N", "sequence=128")
    values = fixed_values(args.value)
    batch_axes = parse_batch_axes(getattr(args, "batch_axis", []))
    inputs_file = None
    if args.inputs is not None:
        arrays = _array_shapes(args.inputs)
        both = sorted(set(arrays) & set(shapes))
        if both:
            raise InvalidSpec(
                f"--shape and --inputs both give input(s) {both}.",
                hint="Drop the --shape: the array's shape is the shape.",
            )
        shapes |= arrays
        inputs_file = str(args.inputs.resolve())
    return InputOptions(
        shapes=shapes, dims=dims, values=values, inputs_file=inputs_file, batch_axes=batch_axes
    )


def fixed_values(texts: list[str]) -> dict[str, Any]:
    """--value NAME=NUMBER or NAME=@FILE.npz (an ArrayValue), checked, by input name."""
    numbers = [text for text in texts if not text.partition("=")[2].startswith("@")]
    values: dict[str, Any] = _assignments("--value", numbers, _number, "NAME=NUMBER", "sr=16000")
    for text in texts:
        name, _, value = text.partition("=")
        if value.startswith("@") and name.strip():
            values[name.strip()] = array_value(name.strip(), Path(value[1:]), "--value")
    return values


def array_values(path: Path) -> dict[str, Any]:
    """Every array of an .npz as a fixed value (the inputs command's --values), by name."""
    from optistudio.core.data.inputs import ArrayValue

    return {
        name: ArrayValue.of(name, array) for name, array in _npz_arrays(path, "--values").items()
    }


def array_value(name: str, path: Path, flag: str) -> Any:
    """The array of `path` named `name` (or its only array) as an ArrayValue."""
    from optistudio.core.data.inputs import ArrayValue

    arrays = _npz_arrays(path, flag)
    if name not in arrays and len(arrays) != 1:
        raise InvalidSpec(
            f"Bad {flag} {name}=@{path}: the file holds {sorted(arrays)}, none named {name!r}.",
            hint=f"Save the array under the input's name: np.savez(path, {name}=array).",
        )
    return ArrayValue.of(name, arrays.get(name, next(iter(arrays.values()))))


def _npz_arrays(path: Path, flag: str) -> dict[str, Any]:
    import numpy as np

    _checked_headers(path, flag)  # a bomb is refused before any array is loaded
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("one array, not named arrays")
        with npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InvalidSpec(
            f"Bad {flag} {str(path)!r}: {exc}. Expected FILE.npz of arrays by input name.",
            hint="Save one with np.savez('values.npz', **{input_name: array}).",
        ) from None


def _assignments(
    flag: str, texts: list[str], parse: Callable[[str], T], form: str, example: str
) -> dict[str, T]:
    parsed: dict[str, T] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            parsed[name.strip()] = parse(value)
        except ValueError:
            raise InvalidSpec(
                f"Bad {flag} {text!r}: expected {form}.", hint=f"For example {flag} {example}"
            ) from None
    return parsed


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",")]
    if min(sizes) < 1:
        raise ValueError
    return sizes


def _size(text: str) -> int:
    (size,) = _sizes(text)
    return size


def _number(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError
    return number


def _array_shapes(path: Path) -> dict[str, list[int]]:
    """The shape of each array in an .npz, by name, from its headers alone (no array is
    loaded); InvalidSpec naming --inputs if unreadable or over the array budget."""
    headers = _checked_headers(path, "--inputs")
    return {name: list(header.shape) for name, header in headers.items()}


def _checked_headers(path: Path, flag: str) -> dict[str, ArrayHeader]:
    """The .npz's headers held against the array budget (checked_npz_headers), a refusal
    there as InvalidSpec naming `flag`."""
    try:
        return checked_npz_headers(path, f"{Path(path).name!r}")
    except DataMismatch as exc:
        raise InvalidSpec(f"Bad {flag} {str(path)!r}: {exc.message}", hint=exc.hint) from None


def validated(spec_class: Any, fields: dict[str, Any], what: str) -> Any:
    from pydantic import ValidationError

    from optistudio.core.errors import describe_validation_error

    try:
        return spec_class(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise InvalidSpec(f"Invalid {what} options: {describe_validation_error(exc)}") from None
