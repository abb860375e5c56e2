"""`specfleet job ...`: generation batches on one target, and the width-cost table per target.

`job generate` runs a JSONL batch of prompts on one target of the fleet through the scheduler
(one run per prompt, stored as a generation job) and prints each reply; `job resume` runs
again the prompts of a job cut short that are not done; `job list` and `job show` read the
stored jobs back. `job calibrate` (cli/job_calibrate.py) measures the per-width verify cost
table on every target and stores it per host.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from specfleet.cli.generate import (
    ChatOption,
    LoopGuardOption,
    SeedOption,
    TempOption,
    chat_without_template,
    parse_loop_guard,
    refuse_seed_when_greedy,
)
from specfleet.cli.job_calibrate import calibrate
from specfleet.cli.options import (
    LOOKUP_FLAG_PREFIX,
    UTC_MINUTE,
    WAIT_DEFAULT,
    AddressOption,
    DbOption,
    EmbeddedOption,
    JobIdArgument,
    ListLimitOption,
    MaxDraftOption,
    ModelAliasOption,
    NgramMaxOption,
    NgramMinOption,
    NoProgressOption,
    WaitOption,
    check_driver_settings,
    counts_text,
    echo_rows,
    flag_given,
    lookup_given,
    parse_wait,
    refuse_hosts_outside_embedded,
    refuse_ngram_min_past_default,
    say_suspects,
    scheduler_options,
    with_policy_option_flags,
    writing_store,
)
from specfleet.cluster.modelcheck import refuse_model
from specfleet.cluster.reach import choose_fleet, open_fleet
from specfleet.engine.config import DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, options_for
from specfleet.engine.kinds import choices_text
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.run import OWN_ARMS, Target
from specfleet.jobs.spec import GenerateJobSpec
from specfleet.settings import LEASE_S
from specfleet.store.leases import lease_live, new_driver_id
from specfleet.store.store import check_store_before_fleet, new_matrix_id, open_store
from specfleet.store.values import utcnow
from specfleet.userfiles import STDIN

app = typer.Typer(help="Generation batches (generate, resume, list, show) and per-target "
                  "calibration on the fleet.",
                  no_args_is_help=True)

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_MAX_TOKENS = GenerateJobSpec.model_fields["max_tokens"].default


@app.command("generate")
@with_policy_option_flags
def generate(
    ctx: typer.Context,
    prompts: Annotated[str, typer.Option("--prompts", help="JSONL file: one {\"prompt\": ...} a line ('-': standard input).")],
    target: Annotated[str, typer.Option("--target", help="HOST/ENGINE or HOST/ENGINE/DEVICE.")],
    policy: Annotated[str, typer.Option("--policy", help=f"{choices_text(OWN_ARMS)}.")] = "auto",
    ngram_min: NgramMinOption = DEFAULT_NGRAM_MIN,
    ngram_max: NgramMaxOption = DEFAULT_NGRAM_MAX,
    max_draft: MaxDraftOption = None,
    model: ModelAliasOption = DEFAULT_MODEL,
    max_tokens: Annotated[int | None, typer.Option(
        "--max-tokens",
        help=f"Per prompt, unless the line says (default {DEFAULT_MAX_TOKENS}).")] = None,
    temp: TempOption = 0.0,
    seed: SeedOption = None,
    chat: ChatOption = None,
    loop_guard: LoopGuardOption = None,
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    no_progress: NoProgressOption = False,
    **own: int | None,
) -> None:
    """Run a batch of prompts on one target, store the outputs as a generation job, print them.

    The `--prompt-lookup-*` settings, `--temp`, `--seed` and `--chat/--no-chat` are
    `generate`'s (`--policy fixed`: max-draft tokens every round). Exit status 0 when every
    prompt is done, 1 otherwise.
    """
    from specfleet.jobs.batch import load_generate_job, select_target

    given = lookup_given(ngram_min, ngram_max, max_draft, own)  # `fixed` is a policy here
    if policy == "plain":
        _refuse_lookup_flags(ctx, own)
    refuse_ngram_min_past_default(ngram_min, ngram_max, flag_given(ctx, "ngram_max"))
    refuse_seed_when_greedy(seed, temp)
    options = _job_options(model=model, target=target, policy=policy,
                           lookup=options_for(policy, given), temperature=temp, seed=seed,
                           max_tokens=max_tokens, chat=chat, loop_guard=loop_guard)
    job = load_generate_job(prompts, **options)  # every mistake is one line, before the fleet
    check_driver_settings()
    here = choose_fleet(address, embedded).embedded
    if here:  # this machine alone: an unknown model is said before Ray starts
        _refuse_here(job, prompts, max_tokens is not None, chat_given=chat is True)
    check_store_before_fleet(db)
    view = open_fleet(address, with_toy=job.target.engine == "toy", hosts=[job.target.host],
                      embedded=embedded)
    # Only the named host was asked for its targets: the others are named by host.
    chosen = select_target(job.target, view.targets, fleet_hosts=view.fleet_hosts)
    if not here:  # asked of the host that would run it, before a job is stored
        refuse_model(job.model, chosen.engine, "--model", view, chosen.host)
    with writing_store(db) as store:  # after the fleet: one that is not there makes no store
        job_id, status = _run_job(store, view, job, chosen, _job_name(prompts), no_progress)
        _print_outputs(store, job_id)
    typer.echo(f"job id: {job_id} ({status})", err=True)  # stdout holds the replies alone
    if status != "done":
        raise typer.Exit(1)


def _job_options(*, max_tokens: int | None, chat: bool | None, loop_guard: str | None,
                 **given: Any) -> dict[str, Any]:
    """The `GenerateJobSpec` fields the flags set (`given` as they are); `--max-tokens` and
    `--chat` only when given (else the spec's defaults), `--loop-guard` parsed as `generate`
    parses it."""
    options = dict(given)
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    if chat is not None:  # else the spec's: the template where the model has one
        options["chat"] = chat
    if (guard := parse_loop_guard(loop_guard)) is not None:  # `generate`'s, per prompt
        options["loop_guard"] = dict(zip(("min_period", "max_period", "repeats"), guard,
                                         strict=True))
    return options


def _refuse_here(job, prompts: str, max_tokens_given: bool, chat_given: bool = False) -> None:
    """On this machine alone, before Ray starts: a host that is not this one, a model it
    cannot load, `--chat` for a model without a chat template (its runs would encode plain
    text, as `generate` refuses), a prompt that overruns the model's context."""
    refuse_hosts_outside_embedded([job.target.host], "--target")
    refuse_model(job.model, job.target.engine, "--model")
    if chat_given and job.target.engine != "toy":
        from specfleet.engine.runners.folders import has_chat_template
        from specfleet.models.registry import resolve_model

        folder = resolve_model(job.model, job.target.engine, measure=False).path
        if folder is not None and not has_chat_template(folder):
            raise chat_without_template("prompts")
    _refuse_overruns(job, f"--prompts {STDIN}" if prompts == STDIN else prompts,
                     max_tokens_given)


def _run_job(store, view, job, chosen, name: str, no_progress: bool) -> tuple[str, str]:
    """Store the job and its runs, run them, and finish it (`interrupted` when cut short).

    Returns:
        (job id, its final status).
    """
    from specfleet.jobs.plan import plan_generate_runs

    job_id = new_matrix_id(f"gen-{name}")
    # Generation runs belong to the job, not to a matrix (runs.matrix_id is a foreign key).
    runs = [r.model_copy(update={"matrix_id": None})
            for r in plan_generate_runs(job, chosen, job_id)]
    params = job.model_dump(mode="json", exclude={"prompts", "target"})
    view.record_hosts(store)
    driver_id = new_driver_id()  # its heartbeat keeps the job's lease and its runs' alive
    store.create_generation_job(name, chosen, job.model, runs, params, job_id, driver_id)
    return job_id, _drive(store, runs, view, no_progress, job_id, driver_id)


def _drive(store, runs, view, no_progress: bool, job_id: str, driver_id: str,
           wait: str = WAIT_DEFAULT) -> str:
    """Run the job's `runs` (stored, `pending`) as `driver_id`, which holds the job, and
    finish it (`interrupted` when cut short); `job generate` and `job resume` alike. A host
    among `view.suspects` is waited for up to `wait` (`--wait`).

    Returns:
        Its final status.
    """
    status = "interrupted"  # unless every run was settled before the signal
    try:
        status = _dispatch(store, runs, view, no_progress, job_id, driver_id, wait)
        store.finish_generation_job(job_id, status, driver_id)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: said with the job's id and its resume
        raise JobInterrupted(job_id, _finish_stopped(store, job_id, status, driver_id)) \
            from None
    except BaseException:  # a store fault: the job no longer runs
        with contextlib.suppress(Exception):  # a store that failed says so in the raise
            store.finish_generation_job(job_id, "interrupted", driver_id)
        raise
    return status


class JobInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a generation job: the message names it and the command
    that runs the rest (a bare "interrupted" left its id to `job list`)."""

    def __init__(self, job_id: str, stored: bool) -> None:
        rest = (f"`specfleet job resume {job_id}` runs the prompts not done, `specfleet job "
                f"show {job_id}` prints the replies it finished")
        super().__init__(f"job {job_id} interrupted; {rest}" if stored else
                         f"job {job_id} interrupted before it could be marked so (it reads "
                         f"interrupted once its lease runs out); {rest}")
        self.job_id = job_id


def _finish_stopped(store, job_id: str, status: str, driver_id: str) -> bool:
    """Store the job's status; False when that could not be done (a store fault, or a second
    Ctrl-C while the write waited: its lease ends it)."""
    try:
        store.finish_generation_job(job_id, status, driver_id)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - best effort, said in the raise
        return False
    return True


def _refuse_lookup_flags(ctx: typer.Context, own: dict[str, Any]) -> None:
    """Plain decoding drafts nothing: a `--prompt-lookup-*` flag given with it would go
    unused without a word."""
    named = [name for name in ("ngram_min", "ngram_max", "max_draft", *own)
             if flag_given(ctx, name)]
    if named:
        flag = LOOKUP_FLAG_PREFIX + named[0].removeprefix("own_").replace("_", "-")
        raise UserError(f"{flag} given with --policy plain, which drafts nothing; expected "
                        "a drafting --policy to use it (or no lookup flags)")


def _refuse_overruns(job: Any, label: str, limit_given: bool) -> None:
    """A prompt whose own tokens and max_tokens pass the model's context on this machine:
    its run would fail once the fleet started, and the failed job stay stored. Counted with
    the model's tokenizer.json before any chat template (a floor), as `matrix run` counts."""
    from specfleet.workers.loaded import sure_overruns

    wanted = [(p.prompt, p.max_tokens or job.max_tokens) for p in job.prompts]
    overruns = sure_overruns(job.model, job.target.engine, wanted)
    if overruns:  # the first one
        i, tokens, limit, context = overruns[0]
        prompt = job.prompts[i]
        where = ("the line's" if prompt.max_tokens else
                 "--max-tokens" if limit_given else "the default of --max-tokens")
        # A prompt that fills the context alone: no max_tokens (at least 1) makes it fit.
        fix = (f"a prompt under {context} tokens" if tokens >= context else
               "a shorter prompt or a smaller max_tokens")
        raise UserError(f"{label}: prompt {prompt.name!r}: {tokens} tokens before any chat "
                        f"template and max_tokens {limit} ({where}) pass the context of "
                        f"{job.model} ({context} tokens); expected {fix}")


def _job_name(prompts: str) -> str:
    """The stored job's name: its prompt file's stem, a character that does not print as `_`
    (a file name's escape sequence or line break reached `job list` and split its row), or
    "stdin"."""
    if prompts == STDIN:
        return "stdin"
    return "".join(ch if ch.isprintable() else "_" for ch in Path(prompts).stem)


def _dispatch(store, runs, view, no_progress: bool, job_id: str, driver_id: str,
              wait: str) -> str:
    from specfleet.cluster.progress import WaitingLines
    from specfleet.cluster.scheduler import dispatch_runs

    options = scheduler_options(no_progress, wait=wait)
    # Without bars a wait and a give-up are still said, as `matrix run --no-progress` says them.
    dispatch_runs(store, runs, view.workers, WaitingLines() if no_progress else None,
                  options=options, machines=view.machines, owner=job_id,
                  suspect=view.suspects, driver_id=driver_id)
    # The job's runs as stored, not this call's alone: a resume keeps done ones and may
    # leave a live driver's.
    counts = store.get_generation_job(job_id).counts
    if set(counts) <= {"done"}:
        return "done"
    if counts.keys() & {"pending", "running", "interrupted"}:
        return "interrupted"
    return "failed"


def _print_outputs(store, job_id: str) -> None:
    for row in store.runs(job=job_id):
        if row.status != "done":
            typer.echo(f"== {row.prompt_name}: {row.status}"
                       + (f": {row.error}" if row.error else ""))
            continue
        typer.echo(f"== {row.prompt_name}: {counted(row.generated_tokens or 0, 'token')}, "
                   f"{row.tok_per_s or 0:.1f} tok/s ({row.resolved_policy})")
        typer.echo(row.output_text or "")


@app.command("resume")
def resume(
    job_id: JobIdArgument,
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    no_progress: NoProgressOption = False,
    wait: WaitOption = WAIT_DEFAULT,
) -> None:
    """Run again every prompt of a generation job that is not done (pending, interrupted or
    failed) and that no live driver runs, on the job's target; done replies are kept. A
    target host that went away (its worker may come back) is waited for, up to --wait.
    Prints every reply of the job, as `job show` does. Exit 1 unless every prompt ends done;
    a job whose prompts are all done says so and exits 0 without a fleet."""
    parse_wait(wait)  # a bad duration is one line, before the fleet
    check_driver_settings()
    # Both flags, or a malformed address, even when every run is done and no fleet starts.
    choose_fleet(address, embedded, joined=False)
    with writing_store(db, existing=True) as store:  # a mistyped --db: not a new empty store
        job = store.get_generation_job(job_id)  # unknown id: one line, before the fleet
        _refuse_live_job_owner(job)
        rows = store.runs(job=job_id, columns=("status",))
        if rows and all(row.status == "done" for row in rows):  # no fleet for nothing
            _finish_all_done(store, job, len(rows))
            return
        target = Target.model_validate({"host": job.host, "engine": job.engine,
                                        "device": job.device})
        here = choose_fleet(address, embedded).embedded
        if here:  # before Ray starts, as `generate` checks them
            refuse_hosts_outside_embedded([job.host], f"job {job_id}")
            _refuse_vanished_model(job, target)
        view = open_fleet(address, with_toy=job.engine == "toy", hosts=[job.host],
                          embedded=embedded)
        if job.host not in view.suspects:  # a host away cannot be asked: waited for instead
            _refuse_target_gone(job, target, view)
            if not here:
                _refuse_vanished_model(job, target, view)
        view.record_hosts(store)
        status = _resume_claimed(store, view, job, rows, no_progress, wait)
        _print_outputs(store, job_id)
    typer.echo(f"job id: {job_id} ({status})", err=True)
    if status != "done":
        raise typer.Exit(1)


def _resume_claimed(store, view, job, rows, no_progress: bool, wait: str) -> str:
    """Claim the job (a live driver's runs are left to it), say what is resumed and kept
    (and the host waited for), run the re-queued runs.

    Returns:
        The job's final status.
    """
    driver_id = new_driver_id()
    claim = store.claim_job(job.id, driver_id, LEASE_S.read())
    if not claim.taken:  # another resume took it since `_refuse_live_job_owner` read it
        _say_live_owner(job.id, claim.owner, claim.lease_until, claim.skipped)
        raise typer.Exit(1)
    typer.echo(resuming_line(job.id, rows), err=True)
    say_suspects(view, wait)
    return _drive(store, store.pending_job_runs(job.id), view, no_progress, job.id, driver_id,
                  wait)


def resuming_line(job_id: str, rows) -> str:
    """`job ID: resuming 2 of 3 prompts (1 pending, 1 interrupted); 1 done kept`, as
    `matrix resume` says it of runs."""
    left = Counter(row.status for row in rows if row.status != "done")
    return (f"job {job_id}: resuming {sum(left.values())} of {counted(len(rows), 'prompt')} "
            f"({counts_text(left)}); {len(rows) - sum(left.values())} done kept")


def _refuse_live_job_owner(job) -> None:
    """A second resume beside a live driver (or the `job generate` still running it): say
    so and stop before starting the fleet, as `matrix resume` does."""
    if job.status == "running" and lease_live(job.driver_id, job.lease_until, utcnow()):
        left = sum(n for status, n in job.counts.items() if status != "done")
        _say_live_owner(job.id, job.driver_id, job.lease_until, left)
        raise typer.Exit(1)


def _say_live_owner(job_id: str, owner, lease_until, left: int) -> None:
    typer.echo(f"job {job_id}: driver {owner} still runs it (heartbeat lease until "
               f"{lease_until:%H:%M:%S} UTC); took 0 prompts, skipped {left}", err=True)


def _finish_all_done(store, job, runs: int) -> None:
    """Every run done: nothing to resume. A job whose driver stopped after its last reply
    but before finishing it read `interrupted` with every run done: it is finished `done`."""
    every = "its one prompt is" if runs == 1 else f"all {runs} prompts are"
    if job.status == "done":
        typer.echo(f"job {job.id}: {every} done; nothing to resume", err=True)
        return
    store.finish_generation_job(job.id, "done")  # no live driver: `_refuse_live_job_owner`
    typer.echo(f"job {job.id}: {every} done; it read {job.status} (its driver stopped "
               "before finishing it), now done", err=True)


def _refuse_vanished_model(job, target: Target, view=None) -> None:
    """The job's model that its host cannot load now (its folder moved or deleted since):
    one line, the runs left as they are, as `matrix resume` refuses it. Without `view`,
    checked on this machine (before Ray starts); a host that does not answer is left to the
    runs."""
    if view is not None and target.host not in view.infos:
        return
    try:
        refuse_model(job.model, target.engine, f"job {job.id}", view, target.host)
    except UserError as err:
        raise UserError(f"{err}; its prompts not done are left as they are: expected the "
                        f"model back, then `specfleet job resume {job.id}`") from None


def _refuse_target_gone(job, target: Target, view) -> None:
    """The job's target not in this fleet: its runs would only stay pending."""
    if target not in view.targets:
        known = ", ".join(sorted(t.label for t in view.targets)) or "none"
        raise UserError(f"job {job.id}: its target {target.label} is not in this fleet "
                        f"(targets: {known}); its prompts not done are left as they are: "
                        f"expected a fleet that has {job.host}, then `specfleet job resume "
                        f"{job.id}`")


@app.command("list")
def list_cmd(
    db: DbOption = None,
    limit: ListLimitOption = 20,
) -> None:
    """Generation jobs, newest first: id, name, target, model, status, prompts done of total,
    submitted."""
    with open_store(db, read_only=True) as store:
        jobs = store.list_generation_jobs(limit=limit)
    echo_rows([(j.id, j.name, f"{j.host}/{j.engine}/{j.device}", j.model, j.status,
                f"{j.counts.get('done', 0)}/{j.total_runs} done",
                f"{j.submitted_at:{UTC_MINUTE}}")
               for j in jobs], "no generation jobs yet")


@app.command("show")
def show(job_id: JobIdArgument, db: DbOption = None) -> None:
    """A stored generation job's replies, as `job generate` printed them, then its status
    (each run whole, as JSON or CSV: `specfleet results --job JOB_ID -o json`)."""
    with open_store(db, read_only=True) as store:
        job = store.get_generation_job(job_id)
        _print_outputs(store, job_id)
    ended = f", finished {job.finished_at:{UTC_MINUTE}}" if job.finished_at else ""
    typer.echo(f"job {job.id} ({job.name}): {job.status}; {counts_text(job.counts)}; "
               f"{job.host}/{job.engine}/{job.device} {job.model}; submitted "
               f"{job.submitted_at:{UTC_MINUTE}}{ended}")


app.command("calibrate")(calibrate)  # registered last: `job --help` lists it after show
