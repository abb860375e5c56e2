"""The torch engine's CUDA path run for real in one call on a lent GPU machine.

This box has no GPU; a session that is lent one has ~15 minutes of it. Prepared here, run
there in one `run` of the device tool (docs/engine.md, "The CUDA check"):

    make device-wheels     # here: the wheels that machine lacks (transformers 5.25...) -> .whl/
    # there, carry [".whl"]:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \
        && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 python3 bench/cuda_check.py --out $OUT

Sections, each bounded by `--budget-s` shares and written as it ends, so a cut run still
returns what it measured ($OUT/cuda_check.json and .md):

1. parity: every torch tiny family on the device in float32 and bfloat16, plain decoding
   against every policy (the families tests' prompts), counted, not asserted: float32 is
   expected identical; bfloat16 may part where a verify row and a one-token step round apart
   (the finding is which families do).
2. pipelined: a reply of pipelined steps (pinned host copies, CUDA events) equals one of
   synchronous steps, on a random model shaped like SmolLM2-135M.
3. costs: the width-cost tables (calibrate --quick) of random models shaped like SmolLM2-135M
   and Qwen3-1.7B in bfloat16: what a verify of each width costs against a pipelined step.
4. speed: plain decode tok/s of our loop against transformers' greedy `generate` on those
   models (both pay Python per step on a GPU: the loop's overhead, measured), and calibrated
   against transformers' prompt lookup on a prompt whose reply copies it (random weights
   make no copy of their own, so the prompt repeats the model's own greedy reply).
5. rollback: recorded against re-fed recurrent rollback per verify on the tiny recurrent
   families (bench/rollback.py's cycle) on the device.
6. bandwidth: the device probe a worker runs before a GPU target's first run
   (`workers/bandwidth.measure_device_read_gb_per_s`), each shape's weight bytes, its
   ceiling (GB/s / bytes a token) and plain decoding's share of it from section 4.

Runs on a CPU too (`--device cpu --quick`), which is how it is tested here.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.cli_args import BenchParser, run_main  # noqa: E402
from specfleet.engine.config import PromptLookupConfig  # noqa: E402
from specfleet.engine.loop import generate  # noqa: E402
from specfleet.engine.runners.common import IdsOnlyTokenizer  # noqa: E402
from specfleet.engine.runners.tiny_torch import TINY_FAMILIES, TINY_VOCAB, tiny_runner  # noqa: E402
from specfleet.engine.runners.torch import TorchRunner  # noqa: E402
from specfleet.engine.runners.torch_rollback import RECORDED_MODEL_TYPES  # noqa: E402
from specfleet.engine.runners.toy import lcg_tokens  # noqa: E402
from specfleet.engine.warmup import warm_up_verify_widths  # noqa: E402
from specfleet.engine.widthcosts import QUICK, measure_width_costs  # noqa: E402

# Random-weight stand-ins for the real models (no weights can reach that machine).
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2-135m-shape": ("llama", {
        "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "tie_word_embeddings": True}),
    "qwen3-1.7b-shape": ("qwen3", {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "tie_word_embeddings": True}),
}


class Report:
    """Sections as they end, rewritten to --out after each (a cut run keeps what it has)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.data: dict[str, Any] = {}
        self.lines: list[str] = []

    def section(self, name: str, data: Any, lines: list[str]) -> None:
        self.data[name] = data
        self.lines += [f"## {name}", "", *lines, ""]
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "cuda_check.json").write_text(json.dumps(self.data, indent=1))
        (self.out / "cuda_check.md").write_text("\n".join(self.lines))
        print("\n".join([f"## {name}", *lines]), flush=True)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def environment(device: str) -> dict[str, Any]:
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env |= {"gpu": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
                "cuda": torch.version.cuda, "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
    return env


def copy_prompt(runner: TorchRunner, seed: int, vocab: int, own_tokens: int = 16) -> list[int]:
    """A seeded start, then the model's own greedy continuation of it, then the start again:
    the reply re-types the continuation, so lookup has something to copy."""
    start = lcg_tokens(seed, 6, vocab)
    own = generate(runner, start, max_tokens=own_tokens).tokens
    return [*start, *own, *lcg_tokens(seed + 100, 4, vocab), *start]


def parity(device: str, prompts: int, deadline: float) -> tuple[dict, list[str]]:
    """`bench/families.py`'s table for every family on `device`, float32 and bfloat16."""
    from bench.families import HEADER, parity_row, row_line

    rows, lines = {}, HEADER.splitlines()
    for family in TINY_FAMILIES:
        for dtype in (torch.float32, torch.bfloat16):
            name = str(dtype).removeprefix("torch.")
            if time.monotonic() > deadline:
                lines.append(f"(cut at {family} {name}: out of time)")
                return rows, lines
            try:
                row = parity_row(family, dtype, device, prompts)
            except Exception as err:  # noqa: BLE001 - a family that fails there is a finding
                rows[f"{family}/{name}"] = {"error": f"{type(err).__name__}: {err}"[:300]}
                lines.append(f"| {family} | {name} | failed: {str(err)[:120]} |")
                continue
            if row is not None:
                rows[f"{family}/{name}"] = row
                lines.append(row_line(row))
    return rows, lines


def shaped_runner(shape: str, device: str, dtype: torch.dtype) -> TorchRunner:
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, settings = SHAPES[shape]
    config = AutoConfig.for_model(model_type, **settings, bos_token_id=None, eos_token_id=None,
                                  pad_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.to(device).eval()
    return TorchRunner(model, IdsOnlyTokenizer(), device)


def pipelined(device: str, dtype: torch.dtype) -> tuple[dict, list[str]]:
    runner = shaped_runner("smollm2-135m-shape", device, dtype)
    prompt = lcg_tokens(7, 64, 49152)
    piped = generate(runner, prompt, max_tokens=48, pipeline=True).tokens
    synced = generate(runner, prompt, max_tokens=48, pipeline=False).tokens
    same = piped == synced
    return ({"identical": same, "tokens": len(piped)},
            [f"pipelined reply == synchronous reply over {len(piped)} tokens: {same}"])


def costs(device: str, dtype: torch.dtype, shapes: list[str]) -> tuple[dict, list[str]]:
    data, lines = {}, []
    for shape in shapes:
        runner = shaped_runner(shape, device, dtype)
        table = measure_width_costs(runner, QUICK)
        data[shape] = {"step_ms": table.pipelined_ms, "ratio": list(table.ratio)}
        lines.append(f"{shape}: pipelined step {table.pipelined_ms:.2f} ms; width 1..{len(table.ratio)}"
                     f" in steps: {' '.join(f'{r:.2f}' for r in table.ratio)}")
        del runner
        if device == "cuda":
            torch.cuda.empty_cache()
    return data, lines


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def arms(runner: TorchRunner, prompt: list[int], tokens: int,
         costs: tuple[float, ...]) -> dict[str, Callable[[], list[int]]]:
    """Each arm's reply on `prompt`, as a call: ours and transformers'."""
    from specfleet.engine.peers import PeerCall
    from specfleet.engine.runners.torch_peers import hf_generate

    def ours(lookup: PromptLookupConfig | None) -> Callable[[], list[int]]:
        return lambda: generate(runner, prompt, max_tokens=tokens, lookup=lookup).tokens

    def theirs(call: PeerCall) -> Callable[[], list[int]]:
        return lambda: hf_generate(runner.model, set(), prompt, call).tokens

    return {
        "plain": ours(None),
        "calibrated": ours(PromptLookupConfig(policy="calibrated", costs=costs)),
        "gated": ours(PromptLookupConfig(policy="gated")),
        "hf": theirs(PeerCall("hf", max_tokens=tokens)),
        "hf-lookup": theirs(PeerCall("hf-lookup", max_tokens=tokens, lookup_tokens=10,
                                     ngram_max=2)),
    }


def speed(device: str, dtype: torch.dtype, shapes: list[str], repeats: int,
          tokens: int) -> tuple[dict, list[str]]:
    data, lines = {}, ["| model | arm | tok/s (whole call, median) | same as plain |",
                       "|---|---|---|---|"]
    for shape in shapes:
        runner = shaped_runner(shape, device, dtype)
        prompt = copy_prompt(runner, 3, SHAPES[shape][1]["vocab_size"], own_tokens=tokens)
        calls = arms(runner, prompt, tokens, tuple(measure_width_costs(runner, QUICK).ratio))
        warm_up_verify_widths(runner, prompt, 32)
        replies = {arm: call() for arm, call in calls.items()}  # one untimed call each
        seconds: dict[str, list[float]] = {arm: [] for arm in calls}
        for _ in range(repeats):  # interleaved
            for arm, call in calls.items():
                seconds[arm].append(timed(call, device)[1])
        data[shape] = {}
        for arm in calls:
            rate = len(replies[arm]) / statistics.median(seconds[arm])
            same = replies[arm] == replies["plain"]
            data[shape][arm] = {"tok_per_s": round(rate, 1), "same_as_plain": same,
                                "seconds": seconds[arm]}
            lines.append(f"| {shape} | {arm} | {rate:.1f} | {'=' if same else '≠'} |")
        del runner, calls
        if device == "cuda":
            torch.cuda.empty_cache()
    return data, lines


def bandwidth(device: str, dtype: torch.dtype, shapes: list[str],
              speeds: dict[str, Any]) -> tuple[dict, list[str]]:
    from specfleet.workers.bandwidth import measure_device_read_gb_per_s, measure_read_gb_per_s

    gb_per_s = measure_device_read_gb_per_s("torch", device) or measure_read_gb_per_s()
    data: dict[str, Any] = {"read_gb_per_s": gb_per_s}
    lines = [f"read bandwidth: {gb_per_s:.1f} GB/s", "",
             "| model | weight bytes | ceiling tok/s | plain tok/s (section 4, whole call) | "
             "share |",
             "|---|---|---|---|---|"]
    for shape in shapes:
        runner = shaped_runner(shape, device, dtype)
        weight_bytes = runner.weight_bytes()
        del runner
        ceiling = gb_per_s * 1e9 / weight_bytes
        plain = (speeds.get(shape) or {}).get("plain", {}).get("tok_per_s")
        share = f"{plain / ceiling:.0%}" if plain else "-"
        data[shape] = {"weight_bytes": weight_bytes, "ceiling_tok_per_s": round(ceiling, 1),
                       "plain_tok_per_s": plain}
        lines.append(f"| {shape} | {weight_bytes:,} | {ceiling:.1f} | {plain or '-'} | {share} |")
    if device == "cuda":
        torch.cuda.empty_cache()
    return data, lines


def rollback(device: str, repeats: int) -> tuple[dict, list[str]]:
    data, lines = {}, ["| family | way back | kept-all cycle ms | reject cycle ms |", "|---|---|---|---|"]
    families = [f for f in TINY_FAMILIES if TINY_FAMILIES[f].model_type in RECORDED_MODEL_TYPES]
    for family in families:
        for way in ("record", "refeed"):
            runner = tiny_runner(family, device, torch.float32, recurrent=way)
            prompt = lcg_tokens(5, 64, TINY_VOCAB)
            cycles: dict[str, list[float]] = {"kept": [], "reject": []}
            width = 5
            for _ in range(repeats):
                for name, undo in (("kept", 0), ("reject", width - 2)):
                    runner.reset()
                    token = runner.read_tokens(runner.argmax(runner.prefill(prompt)))[-1]
                    sync(device)
                    start = time.perf_counter()
                    runner.read_tokens(runner.argmax(runner.forward([token] * width)))
                    runner.rollback(undo)
                    runner.read_tokens(runner.argmax(runner.forward([token])))
                    sync(device)
                    cycles[name].append(time.perf_counter() - start)
            kept, reject = (statistics.median(cycles[n]) * 1000 for n in ("kept", "reject"))
            data[f"{family}/{way}"] = {"kept_ms": kept, "reject_ms": reject}
            lines.append(f"| {family} | {way} | {kept:.2f} | {reject:.2f} |")
    return data, lines


def seconds(text: str) -> float:
    """`--budget-s`: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def main() -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the report, each section written as it ends")
    parser.add_argument("--device", default="cuda",
                        help="torch device (default cuda; cpu with --quick is how it is "
                             "tested here)")
    parser.add_argument("--quick", action="store_true", help="one prompt, the small shape only")
    parser.add_argument("--budget-s", type=seconds, default=420.0,
                        help="seconds the sections share, each its part (default 420)")
    args = parser.parse_args()
    device, began = args.device, time.monotonic()
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("cuda_check: torch sees no CUDA device")
    report = Report(args.out)
    report.section("environment", environment(device), [json.dumps(environment(device))])
    shapes = ["smollm2-135m-shape"] if args.quick else list(SHAPES)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    done: dict[str, Any] = {}  # each section's data, for the later ones
    steps: list[tuple[str, float, Callable[[float], tuple[dict, list[str]]]]] = [
        ("parity", 0.30, lambda end: parity(device, 1 if args.quick else 3, end)),
        ("pipelined", 0.05, lambda end: pipelined(device, dtype)),
        ("costs", 0.15, lambda end: costs(device, dtype, shapes)),
        ("speed", 0.27, lambda end: speed(device, dtype, shapes, 1 if args.quick else 3,
                                          24 if args.quick else 96)),
        ("rollback", 0.20, lambda end: rollback(device, 3 if args.quick else 15)),
        ("bandwidth", 0.03, lambda end: bandwidth(device, dtype, shapes, done.get("speed", {}))),
    ]
    for name, share, step in steps:
        start = time.monotonic()
        try:
            data, lines = step(start + share * args.budget_s)
        except Exception as err:  # noqa: BLE001 - one section failing must not lose the rest
            data, lines = {"error": f"{type(err).__name__}: {err}"[:500]}, [f"failed: {err}"[:500]]
        done[name] = data
        report.section(name, data, [*lines, f"({time.monotonic() - start:.1f} s)"])
    print(f"cuda_check: done in {time.monotonic() - began:.1f} s", flush=True)


if __name__ == "__main__":
    run_main(main)
