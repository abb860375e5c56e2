"""specfleet against its peers on a bundled model, measured in ONE process.

torch engine: specfleet plain vs transformers `generate` (greedy), and specfleet prompt
lookup (auto, graded, gated) vs transformers `prompt_lookup_num_tokens=10`.
MLX engine: specfleet plain vs `mlx_lm.stream_generate` (greedy).

Method (STYLE.md 7, "measure like a harness"): the arms of one engine share one loaded
model; for each prompt and repeat the arms run back to back in an order rotated every
repeat; a cell is the median of the repeats; rates are whole-call tok/s including prefill;
specfleet runs the verify-width warm-up before each timed call (untimed, as the CLI reports
it apart) and every arm is warmed once before anything is timed. Replies that end in a
repeated cycle (loop share > 0.2) are flagged: their lookup "speed-ups" are not real gains.

    .venv/bin/python bench/peers.py --out docs/benchmark_results/peers.md
    .venv/bin/python bench/peers.py --quick      # smoke run: 2 prompts, 1 repeat, no file
    .venv/bin/python bench/peers.py --model gemma3-270m --quick   # the other bundled model

On a quiet 2-core host the full run takes about half an hour: torch ~15 min (5 timed arms x
5 prompts x 3 repeats, ~20 tok/s), MLX ~15 min (MLX's CPU backend prefills ~10 tok/s and
specfleet's untimed warm-up prefills once more). Debian's OpenBLAS, which specfleet loads
for MLX when it is installed (README, `specfleet/openblas.py`), speeds MLX up ~3x;
`--mlx-prompts` narrows it.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import BenchParser, names_in, positive_int, run_main  # noqa: E402
from bench.peers_report import Cell, render_markdown, render_table  # noqa: E402

PROMPTS = ("edit_fn", "edit_json", "summary", "write", "story")
PROMPTS_DIR = REPO / "specfleet" / "configs" / "prompts"
ENGINE_NAMES = ("torch", "mlx")
MODEL = "smollm2-135m"  # the default; `--model` takes any alias both engines resolve
PEER_LOOKUP_TOKENS = 10
LOOKUP_POLICIES = ("graded", "gated", "auto")  # auto last: it reuses a twin's runs
WARM_TOKENS = 8


@dataclass(frozen=True)
class Outcome:
    """One timed call: emitted token ids (EOS excluded), whole-call seconds, counters."""

    tokens: list[int]
    total_s: float
    counters: dict | None = None

    @property
    def tok_per_s(self) -> float:
        return len(self.tokens) / self.total_s if self.total_s > 0 else 0.0


@dataclass
class Arm:
    """A named way to generate: `run(prompt_ids, max_tokens) -> Outcome`."""

    name: str
    run: Callable[[list[int], int], Outcome]
    alias_of: str | None = None  # another arm with the identical config: its runs are reused
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)


def specfleet_arm(name: str, runner, lookup, max_draft: int = 7) -> Arm:
    """specfleet's `generate`, warmed over every verify width before each timed call."""
    from specfleet.engine.loop import generate, warm_up_verify_widths

    def run(ids: list[int], max_tokens: int) -> Outcome:
        warm_up_verify_widths(runner, ids, max_draft)
        result = generate(runner, ids, max_tokens=max_tokens, lookup=lookup)
        stats = result.stats
        counters = {
            "rounds": stats.rounds,
            "drafted": stats.drafted_rounds,
            "paused": stats.paused_rounds,
            "proposed": stats.proposed,
            "accepted": stats.accepted,
            "tpf": stats.tokens_per_forward(len(result.tokens)),
            "shadow": stats.shadow_confirmations,
            "warm_up_s": 0.0,
        }
        return Outcome(list(result.tokens), result.timings.total_s, counters)

    return Arm(name, run)


def transformers_arm(name: str, model, eos_ids: Sequence[int], lookup_tokens: int | None) -> Arm:
    """transformers' own greedy `generate`, optionally with its prompt lookup."""
    import torch

    eos = sorted(eos_ids)

    def run(ids: list[int], max_tokens: int) -> Outcome:
        extra = {"prompt_lookup_num_tokens": lookup_tokens} if lookup_tokens else {}
        input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)
        start_s = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos[0],
                **extra,
            )
        total_s = time.perf_counter() - start_s
        return Outcome(_until_eos(out[0, len(ids) :].tolist(), eos), total_s)

    return Arm(name, run)


def mlx_lm_arm(name: str, model, tokenizer) -> Arm:
    """mlx-lm's `stream_generate`, greedy (its default sampler)."""
    from mlx_lm import stream_generate

    def run(ids: list[int], max_tokens: int) -> Outcome:
        tokens: list[int] = []
        start_s = time.perf_counter()
        for response in stream_generate(model, tokenizer, prompt=ids, max_tokens=max_tokens):
            if response.finish_reason != "stop":  # a "stop" response carries the EOS token
                tokens.append(int(response.token))
        return Outcome(tokens, time.perf_counter() - start_s)

    return Arm(name, run)


def _until_eos(tokens: list[int], eos: Sequence[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[:i]
    return tokens


def model_folder(model: str, engine: str) -> str:
    """The folder `--model` names for `engine`; an unknown name or one not on disk is one line."""
    from specfleet.errors import UserError
    from specfleet.models.registry import resolve_model

    try:
        path = resolve_model(model, engine).path
    except UserError as err:
        raise UserError(f"--model: {err}") from None
    if path is None or not Path(path).exists():
        raise UserError(f"--model {model}: not on disk for {engine}; fetch it with "
                        "`specfleet models fetch` or pass a model folder")
    return str(path)


def torch_arms(policies: Sequence[str], model: str = MODEL) -> tuple[object, list[Arm]]:
    """Load the model once; every torch arm shares the one `PreTrainedModel`."""
    from transformers.utils import logging as hf_logging

    from specfleet.engine.config import PromptLookupConfig, resolve_policy
    from specfleet.engine.runners.torch import TorchRunner

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    runner = TorchRunner.load(model_folder(model, "torch"), "cpu")
    arms = [
        specfleet_arm("sf_plain", runner, None),
        transformers_arm("hf_plain", runner.model, runner.eos_ids, None),
        transformers_arm("hf_lookup10", runner.model, runner.eos_ids, PEER_LOOKUP_TOKENS),
    ]
    measured: dict[str, str] = {}  # resolved policy -> the arm that measures it
    for policy in policies:
        resolved = resolve_policy(policy, runner.device)
        if resolved in measured:  # e.g. auto is graded on CPU: the very same runs
            arms.append(Arm(f"sf_{policy}", arms[0].run, alias_of=measured[resolved]))
            continue
        config = PromptLookupConfig(policy=resolved)
        arms.append(specfleet_arm(f"sf_{policy}", runner, config))
        measured[resolved] = f"sf_{policy}"
    return runner, arms


def mlx_arms(model: str = MODEL) -> tuple[object, list[Arm]]:
    """Load the model for MLX once; both arms share the one mlx-lm model."""
    from specfleet.engine.runners.mlx import MlxRunner

    runner = MlxRunner.load(model_folder(model, "mlx"), "cpu")
    return runner, [
        specfleet_arm("sf_plain", runner, None),
        mlx_lm_arm("mlx_lm", runner.model, runner.tokenizer),
    ]


def rotated(arms: list[Arm], repeat: int) -> list[Arm]:
    shift = repeat % len(arms)
    return arms[shift:] + arms[:shift]


def measure(
    arms: list[Arm],
    prompts: dict[str, list[int]],
    tokens: dict[str, int],
    repeats: int,
    log: Callable[[str], None],
) -> None:
    """Warm every arm once, then run every (prompt, repeat) with the arms interleaved."""
    timed = [arm for arm in arms if arm.alias_of is None]
    first = next(iter(prompts.values()))
    for arm in timed:
        arm.run(first, WARM_TOKENS)
    for name, ids in prompts.items():
        for repeat in range(repeats):
            for arm in rotated(timed, repeat):
                outcome = arm.run(ids, tokens[name])
                arm.outcomes.setdefault(name, []).append(outcome)
                log(
                    f"  {name:<9} rep {repeat} {arm.name:<12} {len(outcome.tokens):>4} tok "
                    f"{outcome.tok_per_s:7.2f} tok/s"
                )
    by_name = {arm.name: arm for arm in arms}
    for arm in arms:
        if arm.alias_of is not None:
            arm.outcomes = by_name[arm.alias_of].outcomes


# Whose reply each arm must equal token for token: lookup arms their engine's plain decoding,
# specfleet plain the peer's plain decoding (and the peer specfleet's).
PARITY_REF = {
    "sf_plain": ("hf_plain", "mlx_lm"),
    "hf_plain": ("sf_plain",),
    "mlx_lm": ("sf_plain",),
    "hf_lookup10": ("hf_plain",),
}


def cells(engine: str, arms: list[Arm], peers: dict[str, str]) -> list[Cell]:
    """One cell per (prompt, arm): medians, ratios to its peer and to specfleet plain."""
    by_name = {arm.name: arm for arm in arms}
    plain = by_name["sf_plain"]
    rows: list[Cell] = []
    for prompt in plain.outcomes:
        for arm in arms:
            peer = peers.get(arm.name)
            ref = next(r for r in PARITY_REF.get(arm.name, ("sf_plain",)) if r in by_name)
            rows.append(
                Cell(
                    engine=engine,
                    prompt=prompt,
                    arm=arm.name,
                    peer=peer,
                    alias_of=arm.alias_of,
                    rates=[o.tok_per_s for o in arm.outcomes[prompt]],
                    first=arm.outcomes[prompt][0],
                    peer_rates=[o.tok_per_s for o in by_name[peer].outcomes[prompt]]
                    if peer
                    else None,
                    plain_rates=[o.tok_per_s for o in plain.outcomes[prompt]],
                    parity_ref=ref,
                    parity_tokens=by_name[ref].outcomes[prompt][0].tokens,
                )
            )
    return rows


def load_prompts(runner, names: Sequence[str], prompts_dir: Path) -> dict[str, list[int]]:
    out = {}
    for name in names:
        path = prompts_dir / f"{name}.txt"
        if not path.is_file():
            raise SystemExit(f"error: {path}: prompt file missing")
        out[name] = runner.encode_prompt(path.read_text(encoding="utf-8"), chat=True)
    return out


def environment() -> dict[str, str]:
    """Versions, host and load: every record carries what produced it."""
    from importlib.metadata import PackageNotFoundError, version

    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    for package in ("torch", "transformers", "mlx", "mlx-lm"):
        try:
            env[package] = version(package)
        except PackageNotFoundError:
            env[package] = "-"
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    env["specfleet_git"] = sha or "-"
    env["LD_PRELOAD"] = os.environ.get("LD_PRELOAD", "-")
    # Spinning OpenMP workers make torch 5-10x slower on a loaded host: record the policy.
    env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "-")
    env["torch_threads"] = _torch_threads()
    return env


def _torch_threads() -> str:
    try:
        import torch

        return str(torch.get_num_threads())
    except ImportError:
        return "-"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: edit_fn and story (or --prompts), 1 repeat, 12 new tokens (story 24), "
             "MLX 8 (16); overrides --repeats, --tokens and --mlx-tokens",
    )
    parser.add_argument("--model", default=MODEL,
                        help=f"model alias (default {MODEL}; gemma3-270m is the other bundled one)")
    parser.add_argument("--engines", default="torch,mlx", type=names_in(ENGINE_NAMES),
                        help="comma list of torch, mlx (default: both)")
    parser.add_argument("--prompts", default=None,
                        help=f"comma list of prompt names in --prompts-dir (default: "
                             f"{','.join(PROMPTS)})")
    parser.add_argument("--prompts-dir", type=Path, default=PROMPTS_DIR,
                        help="folder of NAME.txt prompt files (default: the packaged prompts)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed calls of every arm per prompt (default 3)")
    parser.add_argument("--tokens", type=positive_int, default=200,
                        help="new tokens on torch (default 200; story: 2x)")
    parser.add_argument("--mlx-tokens", type=positive_int, default=48,
                        help="new tokens on MLX (default 48; story: 2x)")
    parser.add_argument("--mlx-prompts", default=None,
                        help="comma list of prompts on MLX (default: those of --prompts)")
    parser.add_argument("--out", type=Path, default=None, help="markdown record to write")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts = args.prompts or "edit_fn,story"
        args.repeats, args.tokens, args.mlx_tokens = 1, 12, 8
    args.prompts = args.prompts or ",".join(PROMPTS)
    for flag, names in (("--prompts", args.prompts), ("--mlx-prompts", args.mlx_prompts)):
        listed = names.split(",") if names else []
        missing = [n for n in listed if not (args.prompts_dir / f"{n}.txt").is_file()]
        if missing:
            parser.error(f"argument {flag}: no prompt file {missing[0]}.txt in "
                         f"{args.prompts_dir}; expected names of its .txt files")
    return args


def token_limits(names: Sequence[str], base: int) -> dict[str, int]:
    return {name: base * 2 if name == "story" else base for name in names}


def run_engine(engine: str, args: argparse.Namespace, log) -> list[Cell]:
    """Load one engine's arms, measure them, and return their cells."""
    names = args.prompts.split(",")
    if engine == "torch":
        runner, arms = torch_arms(LOOKUP_POLICIES, args.model)
        peers = {"sf_plain": "hf_plain", "hf_lookup10": "hf_plain"}
        peers.update({f"sf_{p}": "hf_lookup10" for p in LOOKUP_POLICIES})
        limits = token_limits(names, args.tokens)
    else:
        names = args.mlx_prompts.split(",") if args.mlx_prompts else names
        runner, arms = mlx_arms(args.model)
        peers = {"sf_plain": "mlx_lm"}
        limits = token_limits(names, args.mlx_tokens)
    log(f"{engine} {args.model}: {', '.join(a.name for a in arms)}; tokens {limits}")
    measure(arms, load_prompts(runner, names, args.prompts_dir), limits, args.repeats, log)
    return cells(engine, arms, peers)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python bench/peers.py " + " ".join(sys.argv[1:] if argv is None else argv)
    env = {"model": args.model, **environment()}
    env["load_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    all_cells: list[Cell] = []
    for engine in args.engines.split(","):
        all_cells += run_engine(engine, args, log)
    env["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(render_table(all_cells))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render_markdown(all_cells, env, command, args.repeats))
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
