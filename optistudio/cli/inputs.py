"""`optistudio inputs`: a model's input profile, the shapes and values every job runs it at.

`optistudio inputs model.onnx [--inputs samples.npz]` shows the profile the studio would
propose for a file (sizes it had to guess are named); with --check it runs the model once at
it and tries other sizes for guesses that do not run (optistudio.core.data.probe), as every
command on a file does before it runs the model. `optistudio inputs --model-id N` shows a
stored model's profile; with --shape, --value (a number, or NAME=@FILE.npz: a small array),
--values FILE.npz (every array in it), --batch-axis (NAME=K moves an input's batch axis, e.g.
state=1 for a state [layers, batch, hidden]; NAME=none takes it off the batch) and --save it
sets them, and every later job on the model (and its variants) runs at them. A decoder with a
KV cache (a file or its folder) has none: the decode loop feeds it, and the command says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from optistudio.cli.args import input_options
from optistudio.cli.output import print_json
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.folder import is_decoder_file


def add_inputs_parser(commands: Any) -> None:
    inputs = commands.add_parser(
        "inputs", help="show or set a model's input profile (the shapes every job runs at)"
    )
    inputs.add_argument("model", type=Path, nargs="?", help="an .onnx file (or --model-id)")
    inputs.add_argument("--model-id", type=int, help="a stored model (see `optistudio jobs`)")
    inputs.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D1,D2,...",
        help="an input's full shape at batch 1 (repeatable), e.g. x=1,3,48,320",
    )
    inputs.add_argument(
        "--value",
        action="append",
        default=[],
        metavar="NAME=NUMBER",
        help="a fixed value for an input (repeatable), e.g. sr=16000; NAME=@FILE.npz for a "
        "small array (the array named NAME, or the file's only one)",
    )
    inputs.add_argument(
        "--values",
        type=Path,
        metavar="FILE.npz",
        help="small arrays by input name, each a fixed value of its input",
    )
    inputs.add_argument(
        "--batch-axis",
        action="append",
        default=[],
        metavar="NAME=AXIS|none",
        help="an input's batch axis (repeatable), e.g. state=1 for a state [layers, batch, "
        "hidden]; none runs it at its full shape",
    )
    inputs.add_argument(
        "--inputs",
        type=Path,
        metavar="FILE.npz",
        help="real samples by input name: their sizes replace guesses (a file's proposal)",
    )
    inputs.add_argument(
        "--check",
        action="store_true",
        help="a file's proposal: run the model once at it (ONNX Runtime, CPU) and try other "
        "sizes for the guesses that do not run, as every command on a file does",
    )
    inputs.add_argument("--save", action="store_true", help="store the edited profile")
    inputs.add_argument("--json", action="store_true", help="print one JSON object")


def command_inputs(args: argparse.Namespace) -> int:
    if (args.model is None) == (args.model_id is None):
        raise InvalidSpec("Give an .onnx file or --model-id N (one of them).")
    if args.model is not None:
        if args.save or args.batch_axis or args.shape or args.value or args.values:
            raise InvalidSpec(
                "A file's profile is only proposed; edit and --save a stored model's.",
                hint="Store it first (the studio, or `optistudio bench --save`), then "
                "`optistudio inputs --model-id N --shape ... --save`.",
            )
        if is_decoder_file(args.model):
            return _decoder(args)
        name, profile, check = _proposed_for_file(args)
        saved = False
    else:
        if args.check:
            raise InvalidSpec("--check checks a file's proposal; give the .onnx file.")
        name, profile, saved = _stored(args)
        check = None
    payload = {"model": name, "profile": profile.model_dump(mode="json"), "saved": saved}
    if check is not None:
        payload["check"] = check.summary()
    if args.json:
        print_json(payload | {"lines": profile.lines()})
        return 0
    print(f"Input profile of {name}{' (saved)' if saved else ''}:")
    if check is not None:
        print(f"  {check.line()}")
    for line in profile.lines():
        print(f"  {line}")
    for key, why in profile.guessed.items():
        print(f"  guessed {key}: {why}")
    return 0


def _decoder(args: argparse.Namespace) -> int:
    """A decoder's inputs are the decode loop's (token ids, its own cache): no profile."""
    from optistudio.core.llm.card import read_card
    from optistudio.core.llm.folder import decoder_path

    card = read_card(decoder_path(args.model))
    note = (
        f"{args.model.name} is a decoder with a KV cache: the decode loop feeds it token ids and "
        "its own cache, so no input profile applies. `optistudio bench FILE` times its prefill "
        "and decoding, and `optistudio llm serve-whatif FILE --rate R` predicts serving it."
    )
    facts = {
        "layers": card.layers, "heads": card.heads, "kv_heads": card.kv_heads,
        "vocab": card.vocab, "context_length": card.context_length,
        "kv_bytes_per_token": card.kv_bytes_per_token,
    }  # fmt: skip
    if args.json:
        print_json(
            {"model": args.model.name, "profile": None, "saved": False, "lines": []}
            | {"decoder": facts, "note": note}
        )
        return 0
    print(note)
    print("  " + ", ".join(f"{key} {value}" for key, value in facts.items()))
    return 0


def _proposed_for_file(args: argparse.Namespace) -> tuple[str, Any, Any]:
    """The file's name, its proposed profile and, with --check, the ProfileCheck (its profile
    then the one that ran)."""
    from optistudio.core.data.input_profile import propose_input_profile
    from optistudio.core.data.inputs import read_input_arrays
    from optistudio.core.data.probe import check_profile
    from optistudio.core.model.intake import inspect_model

    info = inspect_model(args.model)
    arrays = read_input_arrays(args.inputs, info.inputs)
    profile = propose_input_profile(info.inputs, arrays=arrays, metadata_keys=info.metadata_keys)
    if not args.check:
        return args.model.name, profile, None
    check = check_profile(args.model, info, profile)
    return args.model.name, check.profile, check


def _stored(args: argparse.Namespace) -> tuple[str, Any, bool]:
    from optistudio.cli.args import array_values
    from optistudio.core.data.input_profile import edited_input_profile, parse_batch_axes
    from optistudio.core.model.info import ModelInfo
    from optistudio.db.queries import get_model
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.input_profiles import load_profile, save_profile
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    with transaction(factory) as s:
        model = get_model(s, model_id=args.model_id)
        if model is None:
            raise InvalidSpec(
                f"No model #{args.model_id} is stored.",
                hint="The studio's Models page lists them; `bench --save` prints the id it stored.",
            )
        name, info = f"#{model.id} {model.name}", ModelInfo.model_validate(model.info)
    profile = load_profile(factory, args.model_id)
    given = input_options(
        argparse.Namespace(shape=args.shape, dim=[], value=args.value, inputs=None)
    )
    axes = parse_batch_axes(args.batch_axis)
    values = {**(array_values(args.values) if args.values else {}), **given.values}
    if not (given.shapes or values or axes):
        if args.save:
            raise InvalidSpec("Nothing to save: give --shape, --value, --values or --batch-axis.")
        return name, profile, False
    edited = edited_input_profile(
        info.inputs,
        shapes={**profile.shapes, **given.shapes},
        batch_axes={**profile.batch_axes, **axes},
        values={**profile.values, **values},
        before=profile,
    )
    if args.save:
        save_profile(factory, args.model_id, edited)
    return name, edited, bool(args.save)
