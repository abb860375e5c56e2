"""`specfleet generate`: one reply from one model on this host, no fleet.

It mirrors the reference `generate --prompt-lookup` command: the reply on stdout
(streamed), then `[Generated N tokens in X s = Y tok/s]` (whole call including prefill),
the prompt and generation rates apart and peak memory; with prompt lookup the
`[Prompt lookup] ...` counters line on stderr. Model loading and flag checks here are
shared with `calibrate.py` (`localmodel.py`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer

from specfleet.cli.generate_io import ReplyStream, print_result, read_prompt
from specfleet.cli.localmodel import DEFAULT_ENGINE, load_model, say, stored_or_measured_costs
from specfleet.cli.options import (
    LOOKUP_FLAG_PREFIX,
    DbOption,
    DeviceOption,
    EngineOption,
    LocalModelOption,
    MaxDraftOption,
    NgramMaxOption,
    NgramMinOption,
    NoAdaptiveOption,
    flag_given,
    lookup_given,
    not_blank,
    refuse_ngram_min_past_default,
    with_policy_option_flags,
)
from specfleet.engine.config import (
    DEFAULT_MAX_DRAFT,
    DEFAULT_NGRAM_MAX,
    DEFAULT_NGRAM_MIN,
    POLICY_CHOICES,
    ConfigError,
    PolicyChoice,
    PromptLookupConfig,
    candidate_policies,
    needs_costs,
    options_for,
    resolve_policy,
)
from specfleet.engine.kinds import choices_text
from specfleet.errors import UserError
from specfleet.jobs.spec import MAX_TOKENS_LIMIT, SEED_RANGE, TEMPERATURE_RANGE
from specfleet.workers.loaded import LoadedModel


def parse_loop_guard(text: str | None) -> tuple[int, int, int] | None:
    """Parse `MIN,MAX,REPEATS` (1 <= MIN <= MAX, 2 <= REPEATS, all at most
    `LOOP_GUARD_MAX`) for `--loop-guard`."""
    if text is None:
        return None
    from specfleet.engine.stats import LOOP_GUARD_MAX, LoopGuardConfig

    try:
        guard = LoopGuardConfig.parse(text).validate()
    except ConfigError:
        raise UserError("--loop-guard expects MIN,MAX,REPEATS integers with 1 <= MIN <= MAX, "
                        f"REPEATS >= 2, all at most {LOOP_GUARD_MAX}; got {text!r}") from None
    return (guard.min_period, guard.max_period, guard.repeats)


def lookup_config(
    given: Mapping[str, Any], policy: str, device: str, costs: tuple[float, ...] | None = None,
) -> PromptLookupConfig:
    """Build and validate the prompt-lookup config; errors name the `--prompt-lookup-*` flag.

    `given` holds the flags given by `LookupOptions` field name (the rest take their
    defaults); `costs` None (calibrated only) checks every bound but the width-cost table,
    which is found or measured after the model loads.
    """
    resolved = resolve_policy(policy, device)
    config = PromptLookupConfig.of(options_for(resolved, given), resolved, costs or ())
    try:
        if costs is None and needs_costs(resolved):
            replace(config, costs=(1.0, 1.0)).validate()
            return config
        return config.validate()
    except ConfigError as err:
        refuse_ngram_min_past_default(config.ngram_min, config.ngram_max, "ngram_max" in given)
        raise UserError(f"{LOOKUP_FLAG_PREFIX}{err}") from None  # it names the bound


def chat_without_template(prompt: str) -> UserError:
    """`--chat` for a model without a chat template (`generate`, `job generate`): its prompt
    would be encoded as plain text, as if --chat were not given."""
    return UserError(f"--chat needs the chat template (this model has none); expected no "
                     f"--chat (the {prompt} as plain text)")


def encode(runner: Any, text: str, chat: bool | None, system: str | None = None) -> list[int]:
    """Token ids of the prompt; `chat=None` applies the chat template where there is one."""
    if chat and not getattr(getattr(runner, "tokenizer", None), "chat_template", None):
        # Else the runner would quietly encode plain text, as if --chat were not given.
        raise chat_without_template("prompt")
    chat = True if chat is None else chat
    if system is None:
        ids = list(runner.encode_prompt(text, chat=chat))
    else:
        ids = list(runner.encode_prompt(text, chat=chat, system=system))
    if not ids:
        raise UserError("--prompt: the prompt encodes to no tokens")
    return ids


@dataclass(frozen=True)
class GenerateRequest:
    """Everything `generate` was asked, validated before any model is loaded."""

    text: str
    max_tokens: int
    temperature: float
    seed: int | None
    use_lookup: bool
    policy: str
    lookup: Mapping[str, Any]  # the --prompt-lookup-* flags given (see `lookup_config`)
    loop_guard: tuple[int, int, int] | None
    system: str | None = None
    policy_given: bool = False  # --prompt-lookup-policy given, even at its default
    prompt_flag: str = "--prompt"  # where the text came from, for messages about it
    db: str | None = None  # the store of width-cost tables (calibrated reads and adds one)


def check_context(loaded: LoadedModel, prompt_tokens: int, max_tokens: int,
                  prompt_flag: str = "--prompt") -> None:
    """The prompt and the reply must fit the model's context (from its config.json)."""
    from specfleet.models.registry import overrun_context

    context = overrun_context(loaded.path, prompt_tokens, max_tokens)
    if context is None:
        return
    if prompt_tokens >= context:  # no --max-tokens would fit: the prompt is at fault
        raise UserError(f"{prompt_flag}: the prompt is {prompt_tokens} tokens, too long for "
                        f"{loaded.alias}'s context of {context} tokens; expected a prompt of "
                        f"at most {context - 1} tokens (room for the reply)")
    raise UserError(f"--max-tokens: the prompt is {prompt_tokens} tokens and --max-tokens "
                    f"{max_tokens}; together they exceed {loaded.alias}'s context of "
                    f"{context} tokens; expected --max-tokens {context - prompt_tokens} or less")


def refuse_seed_when_greedy(seed: int | None, temperature: float) -> None:
    """`--seed` with `--temp 0` (`generate`, `job generate`): greedy draws nothing at random,
    so the seed would go unused without a word."""
    if seed is not None and temperature == 0:
        raise UserError("--seed given with --temp 0 (greedy: nothing is drawn at random); "
                        "expected --temp above 0 to sample with it (or no --seed)")


def validate_request(request: GenerateRequest) -> None:
    """Check the bounds Typer does not (its min/max bound --max-tokens and --seed) before
    loading anything: the model load takes seconds."""
    low, high = TEMPERATURE_RANGE
    # By hand: Typer's max would call nan "not less than or equal to 10".
    if not low <= request.temperature <= high:  # also refuses nan and inf
        raise UserError(f"--temp {request.temperature}: expected a number from {low:g} to "
                        f"{high:g} (0 is greedy)")
    refuse_seed_when_greedy(request.seed, request.temperature)
    if request.use_lookup and request.policy_given and not request.lookup.get("adaptive", True):
        raise UserError(f"--prompt-lookup-policy {request.policy} given with "  # else unused
                        "--prompt-lookup-no-adaptive (every round drafts max-draft tokens: no "
                        "policy decides); expected one of them")
    lookup_config(request.lookup, request.policy, "cpu")
    if request.db is not None:  # a mistyped URL is said before the model loads, not after
        from specfleet.store.engine import resolve_url

        resolve_url(request.db, create_dir=False)
        if not reads_costs(request):  # the reply would run, the store unread: a typo unsaid
            raise UserError("--db: only the calibrated policy reads the store (its width-cost "
                            "table), and this reply would not; expected --prompt-lookup "
                            "--prompt-lookup-policy calibrated beside --db, or no --db")
    if not request.use_lookup:
        given = lookup_flags_given(request)
        if given:  # the reply would be plain decoding's, the settings silently unused
            raise UserError(f"{', '.join(given)} given without --prompt-lookup; expected "
                            "--prompt-lookup to draft with them (or none for plain decoding)")


def reads_costs(request: GenerateRequest) -> bool:
    """Whether the reply may read a width-cost table (`request_lookup`): an adaptive policy
    that needs one, on some device (`auto`'s policy is the device's)."""
    return (request.use_lookup and request.lookup.get("adaptive", True)
            and any(needs_costs(policy) for policy in candidate_policies(request.policy)))


# What `lookup_given` always carries, by key, with the parameter behind it (max-draft and a
# policy's own options it carries only when given).
_ALWAYS_CARRIED = {"ngram_min": "ngram_min", "ngram_max": "ngram_max", "adaptive": "no_adaptive"}


def flags_given(ctx: typer.Context, carried: dict[str, Any]) -> dict[str, Any]:
    """Of `lookup_given`'s settings, those whose flag was given: one typed at its default is
    still a setting plain decoding would ignore."""
    return {key: value for key, value in carried.items()
            if key not in _ALWAYS_CARRIED or flag_given(ctx, _ALWAYS_CARRIED[key])}


def lookup_flags_given(request: GenerateRequest) -> list[str]:
    """The --prompt-lookup-* flags given, by flag name."""
    names = ["policy"] if request.policy_given else []
    names += list(request.lookup)
    return [LOOKUP_FLAG_PREFIX + ("no-adaptive" if name == "adaptive" else name.replace("_", "-"))
            for name in names]


@contextmanager
def status_line(message: str) -> Iterator[None]:
    """A spinner with `message` on stderr while the block runs, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield


def run_generation(
    loaded: LoadedModel,
    request: GenerateRequest,
    *,
    chat: bool | None,
    warm_up: bool,
    trace: bool,
    stream: ReplyStream | None = None,
    announce: bool = False,
) -> dict[str, Any]:
    """Warm up (timed apart), generate, and return the result as one JSON-ready dict.

    Args:
        loaded: the model.
        request: the validated request.
        chat: apply the chat template (None: where there is one).
        warm_up: run the verify widths first (once per loaded model per process).
        trace: record the round-by-round trace.
        stream: prints the reply as its tokens are decided; None prints nothing.
        announce: say the warm-up's time on stderr before the reply starts.

    Returns:
        The `--json` object (see `result_dict`).
    """
    from specfleet.engine.loop import generate
    from specfleet.engine.runners.base import UnsupportedModelError
    from specfleet.engine.sampling import SamplerConfig
    from specfleet.workers.machinelock import holding_this_machine

    runner = loaded.runner
    prompt_ids = encode(runner, request.text, chat, request.system)
    check_context(loaded, len(prompt_ids), request.max_tokens, request.prompt_flag)
    lookup = request_lookup(loaded, request)
    warmup_s = 0.0
    sampler = SamplerConfig(temperature=request.temperature, seed=request.seed)
    with holding_this_machine("specfleet generate", say):
        if warm_up:  # also for plain: the first forwards of a fresh model pay one-off costs
            warmup_s = warm_verify_widths(loaded, prompt_ids, lookup, announce)
        try:
            result = generate(
                runner,
                prompt_ids,
                max_tokens=request.max_tokens,
                lookup=lookup,
                sampler=sampler.validate(),
                loop_guard=request.loop_guard,
                trace=trace,
                on_tokens=stream,
            )
        except UnsupportedModelError as err:
            raise UserError(f"--prompt-lookup: {loaded.alias}: {err}") from None
    return result_dict(loaded, prompt_ids, lookup, result, warmup_s, sampler)


def request_lookup(loaded: LoadedModel, request: GenerateRequest) -> PromptLookupConfig | None:
    """The request's prompt-lookup config on this model's device (None for plain); the
    calibrated policy gets this host's stored width-cost table, or one measured now."""
    if not request.use_lookup:
        return None
    from specfleet.engine.loop import unsupported_reason

    reason = unsupported_reason(loaded.runner)
    if reason is not None:  # before any warm-up or table measurement is paid for
        raise UserError(f"--prompt-lookup: {loaded.alias}: {reason}")
    lookup = lookup_config(request.lookup, request.policy, loaded.runner.device)
    if lookup.adaptive and needs_costs(lookup.policy):
        lookup = replace(lookup, costs=stored_or_measured_costs(loaded, request.db))
    return lookup


def warm_verify_widths(loaded: LoadedModel, prompt_ids: list[int],
                       lookup: PromptLookupConfig | None, announce: bool) -> float:
    """Warm the widths the reply may verify behind a status line; their time, said apart."""
    max_draft = lookup.max_draft if lookup is not None else DEFAULT_MAX_DRAFT
    widths = f"2..{loaded.warm_draft(max_draft) + 1}"  # fewer where the context is short
    with status_line(f"warming up verify widths {widths} ({loaded.alias}, "
                     f"{loaded.runner.engine})"):
        warmup_s = loaded.warm(prompt_ids, max_draft)
    if announce and warmup_s > 0:
        # Plain decoding verifies nothing: its warm-up is the model's first forwards.
        what = f"verify widths {widths}" if lookup is not None else f"first forwards (widths {widths})"
        typer.echo(f"[Warm-up] {what} in {warmup_s:.3f} s (not in the figures below)",
                   err=True)
    return warmup_s


def result_dict(
    loaded: LoadedModel,
    prompt_ids: list[int],
    lookup: PromptLookupConfig | None,
    result: Any,
    warmup_s: float,
    sampler: Any,
) -> dict[str, Any]:
    """The `--json` object: text, token ids, counters, timings (seconds), provenance (the
    `sampler`'s temperature and seed: a sampled reply is reproduced by both)."""
    from specfleet.engine.stats import decode_tok_per_s, loop_share, prompt_tok_per_s

    tokens = list(result.tokens)
    timings = result.timings
    memory_gb, memory_kind = loaded.runner.peak_memory()
    stats = result.stats
    counters = dataclasses.asdict(stats)
    counters["acceptance_rate"] = stats.acceptance_rate
    counters["tokens_per_forward"] = stats.tokens_per_forward(len(tokens))
    return {
        "text": loaded.runner.decode(tokens),
        "token_ids": tokens,
        "prompt_tokens": len(prompt_ids),
        "generated_tokens": len(tokens),
        "stop_reason": result.stop_reason,
        "loop_share": loop_share(tokens),
        "timings": {
            "prefill_s": timings.prefill_s,
            "decode_s": timings.decode_s,
            "total_s": timings.total_s,
            "warmup_s": warmup_s,
        },
        "tok_per_s": len(tokens) / timings.total_s if timings.total_s > 0 else 0.0,
        "prompt_tok_per_s": prompt_tok_per_s(len(prompt_ids), timings.prefill_s),
        "decode_tok_per_s": decode_tok_per_s(len(tokens), timings.decode_s),
        "peak_memory_gb": memory_gb,
        "memory_kind": memory_kind,
        "prompt_lookup": lookup.as_dict() if lookup is not None else None,
        "sampler": {"temperature": sampler.temperature, "seed": sampler.seed},
        "counters": counters,
        "summary_line": stats.summary_line(len(tokens)) if lookup is not None else None,
        "model": {"alias": loaded.alias, "path": loaded.path, "weights_hash": loaded.weights_hash},
        "engine": loaded.runner.engine,
        "device": loaded.runner.device,
        "trace": [dataclasses.asdict(row) for row in (result.trace or [])],
    }


# `generate`'s own options (the --prompt-lookup-* ones are shared: cli/options.py).
PromptOption = Annotated[str | None, typer.Option(
    "--prompt", "-p", help="Prompt text; - reads standard input.")]
PromptFileOption = Annotated[str | None, typer.Option(
    "--prompt-file",
    help="Read the prompt from a file, a packaged prompt by name (story), or - (stdin).")]
SystemPromptOption = Annotated[str | None, typer.Option(
    "--system-prompt", callback=not_blank("the system turn's text"),
    help="A system turn before the prompt (chat template).")]
MaxTokensOption = Annotated[int, typer.Option(
    "--max-tokens", "-n", min=1, max=MAX_TOKENS_LIMIT, help="Most tokens to generate.")]
TempOption = Annotated[float, typer.Option("--temp", help="Temperature; 0 is greedy.")]
SeedOption = Annotated[int | None, typer.Option(
    "--seed", min=SEED_RANGE[0], max=SEED_RANGE[1], help="Sampler seed.")]
PolicyOption = Annotated[PolicyChoice, typer.Option(
    "--prompt-lookup-policy", help=f"{choices_text(POLICY_CHOICES)} (the `fixed` arm's "
    "fixed draft length: --prompt-lookup-no-adaptive).")]
ChatOption = Annotated[bool | None, typer.Option(
    "--chat/--no-chat", help="Apply the chat template (default: where there is one).")]
LoopGuardOption = Annotated[str | None, typer.Option(
    "--loop-guard", help="MIN,MAX,REPEATS: stop a reply that repeats one period.")]
WarmUpOption = Annotated[bool, typer.Option(
    "--warm-up/--no-warm-up", help="Run every verify width once before timing.")]


@with_policy_option_flags
def generate_command(
    ctx: typer.Context,
    model: LocalModelOption,
    prompt: PromptOption = None,
    prompt_file: PromptFileOption = None,
    system_prompt: SystemPromptOption = None,
    max_tokens: MaxTokensOption = 256,
    temp: TempOption = 0.0,
    seed: SeedOption = None,
    engine: EngineOption = DEFAULT_ENGINE,
    device: DeviceOption = "auto",
    prompt_lookup: Annotated[
        bool, typer.Option("--prompt-lookup", help="Draft by n-gram lookup.")] = False,
    policy: PolicyOption = "auto",
    ngram_min: NgramMinOption = DEFAULT_NGRAM_MIN,
    ngram_max: NgramMaxOption = DEFAULT_NGRAM_MAX,
    max_draft: MaxDraftOption = None,
    no_adaptive: NoAdaptiveOption = False,
    chat: ChatOption = None,
    loop_guard: LoopGuardOption = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON object on stdout (whole, not streamed).")] = False,
    trace: Annotated[bool, typer.Option("--trace", help="Print the round-by-round trace.")] = False,
    warm_up: WarmUpOption = True,
    db: DbOption = None,
    **own: int | None,
) -> None:
    """Generate one reply, with or without prompt lookup, and print its speed.

    The reply streams to stdout as its tokens are decided; the footer gives the whole call,
    the prompt (prefill) and generation (decode) rates apart, and peak memory.
    """
    if system_prompt is not None and chat is False:  # else refused only once the model loads
        raise UserError("--system-prompt needs the chat template, and --no-chat was given; "
                        "expected one of them")
    lookup = flags_given(ctx, lookup_given(ngram_min, ngram_max, max_draft, own, no_adaptive))
    request = GenerateRequest(
        text=read_prompt(prompt, prompt_file),
        max_tokens=max_tokens,
        temperature=temp,
        seed=seed,
        use_lookup=prompt_lookup,
        policy=policy,
        lookup=lookup,
        loop_guard=parse_loop_guard(loop_guard),
        system=system_prompt,
        policy_given=flag_given(ctx, "policy"),
        prompt_flag="--prompt-file" if prompt_file is not None else "--prompt",
        db=db,
    )
    validate_request(request)
    from specfleet.dirs import runtime_dir

    runtime_dir()  # the machine lock's folder must be usable before the model loads
    reply(load_model(model, engine, device), request, chat=chat, warm_up=warm_up, trace=trace,
          as_json=as_json)


def reply(loaded: LoadedModel, request: GenerateRequest, *, chat: bool | None, warm_up: bool,
          trace: bool, as_json: bool) -> None:
    """Generate the reply, streaming it to stdout as its tokens are decided (whole with
    `as_json`), then its footer; a reply cut short ends its line first."""
    stream = None if as_json else ReplyStream(loaded.runner.decode)
    try:
        result = run_generation(loaded, request, chat=chat, warm_up=warm_up, trace=trace,
                                stream=stream, announce=not as_json)
    except BaseException:
        if stream is not None:
            stream.cut()
        raise
    print_result(result, as_json=as_json, trace=trace, stream=stream)


def register(app: typer.Typer) -> None:
    """Add the top-level `generate` command to the root app."""
    app.command("generate")(generate_command)
