"""What is stored, and deleting it: `optistudio models` (with what each occupies on disk),
`optistudio models add PATH` (cli.model_add), `optistudio models delete ID`, `optistudio results delete JOB` and `optistudio jobs delete JOB`.

A delete first says what it removes and frees (N variants, M results, K jobs, X MB on disk).
With `--yes` it deletes at once; without it, a terminal asks, and anything else (a script,
`--json`) gets that confirmation only, with nothing deleted and exit status 0. A job still
queued or running is refused (exit 2): cancel it first. Needs the database only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from optistudio.cli.model_add import add_model_add_parser, command_model_add
from optistudio.cli.output import print_json

CONFIRM = "Nothing deleted: run it again with --yes to delete."


def add_models_parser(commands: Any) -> None:
    models = commands.add_parser(
        "models", help="list the stored models and what each occupies on disk; delete one"
    )
    models.add_argument("--json", action="store_true", help="print one JSON object")
    actions = models.add_subparsers(dest="models_action", metavar="{add,delete}")
    add_model_add_parser(actions)
    delete = actions.add_parser(
        "delete", help="delete a model with its variants, results, jobs and files"
    )
    delete.add_argument("id", type=int, metavar="MODEL_ID", help="stored model id")
    add_delete_flags(delete)


def add_results_parser(commands: Any) -> None:
    results = commands.add_parser("results", help="delete a stored result")
    actions = results.add_subparsers(dest="results_action", metavar="{delete}", required=True)
    delete = actions.add_parser(
        "delete", help="delete a result: the succeeded job that measured it, and its files"
    )
    delete.add_argument("id", type=int, metavar="JOB_ID", help="the result's job id")
    add_delete_flags(delete)


def add_job_delete_parser(jobs: argparse.ArgumentParser) -> None:
    """`optistudio jobs delete JOB` beside the `jobs` listing."""
    actions = jobs.add_subparsers(dest="jobs_action", metavar="{delete}")
    delete = actions.add_parser("delete", help="delete a finished job, its results and files")
    delete.add_argument("id", type=int, metavar="JOB_ID", help="job id")
    add_delete_flags(delete)


def add_delete_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", action="store_true", help="delete without asking")
    parser.add_argument(  # SUPPRESS: `models --json delete 3` keeps the parent's --json
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object"
    )


def command_models(args: argparse.Namespace) -> int:
    if args.models_action == "delete":
        return command_delete(args, what="model")
    if args.models_action == "add":
        return command_model_add(args)
    return list_models(args)


def command_results(args: argparse.Namespace) -> int:
    return command_delete(args, what="result")


def command_delete(args: argparse.Namespace, *, what: str) -> int:
    """Plan, confirm (or only show the plan), delete; `what` is model, result or job."""
    factory, settings = _database()
    plan = _planner(what, args.id)(factory, settings)
    refusal = plan.refusal()
    if refusal is not None:
        raise refusal
    as_json = getattr(args, "json", False)
    if not (args.yes or _confirmed(plan, as_json)):
        _report(plan, deleted=False, as_json=as_json)
        return 0
    done = _planner(what, args.id, carry_out=True)(factory, settings)
    _report(done, deleted=True, as_json=as_json)
    return 0


def _planner(what: str, item: int, *, carry_out: bool = False) -> Callable[..., Any]:
    from optistudio.services import deletion

    if what == "model":
        act = deletion.delete_model if carry_out else deletion.plan_model_deletion
        return lambda factory, settings: act(factory, settings, model_id=item)
    job_act = deletion.delete_job if carry_out else deletion.plan_job_deletion
    return lambda factory, settings: job_act(
        factory, settings, job_id=item, result=what == "result"
    )


def _confirmed(plan: Any, as_json: bool) -> bool:
    """Ask on a terminal; never otherwise (a script confirms with --yes)."""
    if as_json or not sys.stdin.isatty():
        return False
    print(plan.sentence())
    for note in plan.kept:
        print(note)
    return input("Delete? [y/N] ").strip().lower() in ("y", "yes")


def _report(plan: Any, *, deleted: bool, as_json: bool) -> None:
    if as_json:
        print_json(deletion_json(plan, deleted=deleted))
        return
    if deleted:
        print(f"Deleted {plan.subject}: freed {plan.freed()}.")
    else:
        print(plan.sentence())
        for note in plan.kept:
            print(note)
        print(CONFIRM)


def deletion_json(plan: Any, *, deleted: bool) -> dict[str, Any]:
    """A plan (or what went) as the CLI's JSON: the plan's fields, the bytes in all and the
    sentence a person would read."""
    said = {"deleted": deleted, "sentence": plan.sentence(), "bytes_on_disk": plan.bytes_on_disk}
    return said | plan.model_dump(mode="json")


def list_models(args: argparse.Namespace) -> int:
    """Every stored model with what deleting it would free."""
    from optistudio.db.queries import list_models as stored_models
    from optistudio.db.session import transaction
    from optistudio.services.deletion import plan_model_deletion

    factory, settings = _database()
    with transaction(factory) as s:
        rows = [_model_json(model) for model in stored_models(s)]
    for row in rows:
        plan = plan_model_deletion(factory, settings, model_id=row["id"])
        row |= {"on_disk_bytes": plan.bytes_on_disk, "on_disk": plan.freed()}
    if args.json:
        print_json({"models": rows})
        return 0
    if not rows:
        print("No models stored yet.")
    for row in rows:
        parent = f" (variant of #{row['parent_id']})" if row["parent_id"] else ""
        print(f"#{row['id']:<4} {row['name']}{parent}: {row['on_disk']}")
    return 0


def _model_json(model: Any) -> dict[str, Any]:
    return {
        "id": model.id,
        "name": model.name,
        "source": model.source,
        "parent_id": model.parent_id,
        "sha256": model.sha256,
        "size_bytes": model.size_bytes,
        "created_at": model.created_at.isoformat(timespec="seconds"),
    }


def _database() -> tuple[Any, Any]:
    from optistudio.db.session import make_session_factory
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import get_settings

    settings = get_settings()
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    return make_session_factory(settings.database_url), settings
