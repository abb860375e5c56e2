"""A small stored matrix pair with every value fixed, and the CLI outputs read from it.

`python -m tests.golden.build --write` rewrites `tests/golden/expected/` from the current
code; do that only in a commit that changes these outputs on purpose and says so.
"""

from __future__ import annotations

import argparse
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunResult, RunSpec, Target
from specfleet.store.store import open_store
from specfleet.workers.conditions import GpuReading, HostConditions
from specfleet.workers.conditions.probe import run_fields

EXPECTED = Path(__file__).parent / "expected"
A, B = "gold-a-000001", "gold-b-000002"
T1 = Target(host="mac1", engine="mlx", device="metal")
T2 = Target(host="spark1", engine="torch", device="cuda")
PROMPTS = {"code": "def add(a, b):\n    return a + b\n", "story": "Once upon a time there was"}
BASE_TOKENS = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
HOSTS = (
    {"name": "mac1", "machine_id": "m-1", "kind": "mac-mlx", "os": "Darwin 24.1", "arch": "arm64",
     "chip": "Apple M4 Max", "memory_gb": 64.0, "versions": {"mlx": "0.32.0", "python": "3.12"}},
    {"name": "spark1", "machine_id": "s-1", "kind": "gb10-cuda", "os": "Linux 6.11",
     "arch": "aarch64", "chip": "NVIDIA GB10", "memory_gb": 128.0,
     "versions": {"torch": "2.13.0", "python": "3.12"}},
)
# (target, model, prompt, arm) -> repeats' tok/s in matrix A; counters vary with the arm.
RATES_A = {
    "plain": (100.0, 101.0, 99.0),
    "graded": (150.0, 152.0, 148.0),
    "gated": (100.5, 101.0, 100.0),
    "fixed": (90.0, 120.0, 105.0),
}
COUNTERS = {  # rounds, drafted, paused, proposed, accepted, shadow
    "plain": (12, 0, 0, 0, 0, 0),
    "graded": (6, 4, 1, 14, 9, 2),
    "gated": (9, 2, 3, 7, 3, 1),
    "fixed": (5, 5, 0, 35, 11, 0),
}


def _tokens(target: Target, prompt: str, arm: str) -> list[int]:
    tokens = list(BASE_TOKENS)
    if (target, prompt, arm) == (T2, "code", "graded"):
        tokens[5] = 99  # diverges from plain at token 5
    if (target, prompt) == (T2, "story"):
        tokens[3] = 77  # every arm alike: plain disagrees across targets
    return tokens


def _cells(matrix: str):
    for target in (T1, T2):
        for model in ("m1", "loopy"):
            for prompt in PROMPTS:
                for arm, rates in RATES_A.items():
                    if model == "loopy" and (arm == "fixed" or prompt == "story"):
                        continue
                    if matrix == B and (target, model, prompt, arm) == (T1, "m1", "code",
                                                                         "graded"):
                        rates = (120.0, 121.0, 119.0)  # a regression against A
                    if matrix == B and (target, prompt, arm) == (T2, "story", "plain"):
                        rates = (130.0, 131.0, 129.0)  # faster
                    yield target, model, prompt, arm, rates


def _specs(matrix: str) -> list[tuple[RunSpec, float]]:
    out = []
    for target, model, prompt, arm, rates in _cells(matrix):
        for repeat, rate in enumerate(rates):
            spec = RunSpec(
                run_key=f"{matrix}/{target.label}/{model}/{prompt}/{arm}/{repeat}",
                matrix_id=matrix, target=target, model=model, prompt_name=prompt,
                prompt_text=PROMPTS[prompt], arm=arm, repeat=repeat, max_tokens=12, seed=7,
            )
            out.append((spec, rate))
    return out


def _conditions(spec: RunSpec, matrix: str) -> dict:
    """Host conditions before/after a run: matrix B's Mac runs in Low Power Mode; one
    GB10 run of A is thermally slowed down (THROTTLED)."""
    hot = (matrix, spec.target, spec.prompt_name, spec.arm, spec.repeat) == (
        A, T2, "story", "gated", 1)
    if spec.target == T1:
        reading = HostConditions(at=0.0, platform="darwin", power_source="ac",
                                 low_power_mode=matrix == B, mem_available_gb=40.0)
    else:
        gpu = GpuReading(index=0, name="NVIDIA GB10", sm_clock_mhz=2900.0,
                         sm_clock_max_mhz=3003.0, temperature_c=88.0 if hot else 55.0,
                         throttle_reasons=("sw_thermal_slowdown",) if hot else ())
        reading = HostConditions(at=0.0, platform="linux", cpu_governor="performance",
                                 cpu_mhz=3900.0, cpu_max_mhz=3900.0, cpu_limit_mhz=3900.0,
                                 mem_available_gb=100.0, gpus=(gpu,), gpu_source="nvml")
    return run_fields(reading, reading)


def _result(spec: RunSpec, rate: float, index: int, matrix: str) -> RunResult:
    tokens = _tokens(spec.target, spec.prompt_name, spec.arm)
    rounds, drafted, paused, proposed, accepted, shadow = COUNTERS[spec.arm]
    loop = 0.75 if spec.model == "loopy" else 0.05 * spec.repeat
    started = START + timedelta(minutes=index)
    versions = {"specfleet": "0.1.0", "engine": "1.0" if matrix == A else "1.1"}
    total_s = len(tokens) / rate
    return RunResult(
        run_key=spec.run_key, status="done", target=spec.target,
        resolved_policy="plain" if spec.arm == "plain" else spec.arm,
        output_text=" ".join(map(str, tokens)), token_ids=tokens, prompt_tokens=9,
        generated_tokens=len(tokens), prefill_s=0.02, decode_s=round(total_s - 0.02, 6),
        total_s=round(total_s, 6), tok_per_s=rate, warmup_s=0.5, stop_reason="max_tokens",
        rounds=rounds, drafted_rounds=drafted, paused_rounds=paused, proposed=proposed,
        accepted=accepted, shadow_confirmations=shadow, loop_share=loop,
        noisy=spec.repeat == 2 and spec.arm == "fixed",
        load_before=(0.5 + spec.repeat / 10, 0.4, 0.3), load_after=(0.6, 0.4, 0.3),
        weights_hash="w" * 16, engine_config={"max_draft": 7}, versions=versions,
        started_at=started, finished_at=started + timedelta(seconds=1),
        **_conditions(spec, matrix),
    )


def build_store(path: Path) -> str:
    """Write matrices A and B into a new SQLite file at `path`; return its URL."""
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        for host in HOSTS:
            store.upsert_host(host)
        for n, matrix in enumerate((A, B)):
            planned = _specs(matrix)
            store.create_matrix(f"golden-{'ab'[n]}", {"name": f"golden-{'ab'[n]}", "repeats": 3},
                                [s for s, _ in planned], matrix_id=matrix)
            for index, (spec, rate) in enumerate(planned):
                store.record_result(_result(spec, rate, index, matrix))
            store.finish_matrix(matrix, "done")
    with sqlite3.connect(path) as conn:  # the store stamps these with the wall clock
        for n, matrix in enumerate((A, B)):
            day = f"2026-11-0{n + 1}"
            conn.execute("update matrices set submitted_at=?, finished_at=? where id=?",
                         (f"{day} 12:00:00.000000", f"{day} 13:00:00.000000", matrix))
            conn.execute("update runs set created_at=? where matrix_id=?",
                         (f"{day} 12:00:00.000000", matrix))
    return url


def outputs(url: str, report_dir: Path) -> dict[str, str]:
    """Every golden output by file name: `matrix show` (all formats, both pivots),
    `report` (markdown record), `compare` and `history` (all formats)."""
    runner = CliRunner()

    def cli(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, [*args, "--db", url])
        assert result.exit_code == code, (args, result.output, result.exception)
        return result.stdout

    out = {}
    for fmt in ("table", "json", "csv", "markdown"):
        ext = {"table": "txt", "markdown": "md"}.get(fmt, fmt)
        out[f"show.{ext}"] = cli("matrix", "show", A, "--format", fmt)
        out[f"show-pivot.{ext}"] = cli("matrix", "show", A, "--format", fmt, "--pivot", "target")
    for fmt, ext in (("table", "txt"), ("json", "json"), ("csv", "csv")):
        out[f"compare.{ext}"] = cli("compare", A, B, "--format", fmt)
        out[f"history.{ext}"] = cli("history", "--model", "m1", "--prompt", "code", "--arm",
                                    "graded", "--format", fmt)
    out["compare-mixed.txt"] = cli("compare", A, B, "--allow-mixed", code=1)  # a regression
    out["results-cells.txt"] = cli("results", "--matrix", A, "--cells")
    cli("report", A, "--out", str(report_dir))
    out["report.md"] = (report_dir / f"{A}.md").read_text()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the golden files")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        url = build_store(Path(tmp) / "golden.db")
        produced = outputs(url, Path(tmp) / "report")
    EXPECTED.mkdir(exist_ok=True)
    for name, text in produced.items():
        path = EXPECTED / name
        same = path.exists() and path.read_text() == text
        if args.write and not same:
            path.write_text(text)
        print(f"{name}: {'same' if same else 'written' if args.write else 'DIFFERS'}")


if __name__ == "__main__":
    main()
