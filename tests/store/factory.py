"""Tiny exact RunSpecs and RunResults for the store tests."""

from __future__ import annotations

from datetime import UTC, datetime

from specfleet.jobs.run import RunResult, RunSpec, Target

HOST_A = Target(host="mac1", engine="mlx", device="metal")
HOST_B = Target(host="spark1", engine="torch", device="cuda")
PROMPTS = {"edit_fn": "def f(x):\n    return x\n", "story": "Once upon a time"}


def spec(key: str, arm: str = "plain", *, target: Target = HOST_A, model: str = "m1",
         prompt: str = "edit_fn", repeat: int = 0, matrix_id: str | None = None) -> RunSpec:
    return RunSpec(
        run_key=key, matrix_id=matrix_id, target=target, model=model, prompt_name=prompt,
        prompt_text=PROMPTS[prompt], arm=arm, repeat=repeat, max_tokens=32, seed=7,
    )


def result(run: RunSpec, tok_per_s: float = 10.0, *, status: str = "done", noisy: bool = False,
           loop_share: float = 0.0, accepted: int = 3, text: str = "out") -> RunResult:
    return RunResult(
        run_key=run.run_key, status=status, target=run.target,
        resolved_policy="plain" if run.arm == "plain" else "graded", output_text=text,
        token_ids=[5, 6, 7], prompt_tokens=11, generated_tokens=3, prefill_s=0.1, decode_s=0.2,
        total_s=0.3, tok_per_s=tok_per_s, stop_reason="max_tokens", rounds=4, drafted_rounds=2,
        proposed=5, accepted=accepted, loop_share=loop_share, noisy=noisy,
        load_before=(0.5, 0.4, 0.3), load_after=(0.6, 0.4, 0.3), weights_hash="w" * 8,
        versions={"specfleet": "0.1.0", "torch": "2.13.0"}, engine_config={"k": 1},
        started_at=datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
        finished_at=datetime(2026, 11, 1, 12, 0, 1, tzinfo=UTC),
    )


def grid(arms=("plain", "graded"), repeats: int = 3, targets=(HOST_A,), models=("m1",),
         prompts=("edit_fn",), prefix: str = "k") -> list[RunSpec]:
    """Runs in plan order: target, model, prompt, repeat, then arms back to back."""
    out = []
    for t in targets:
        for m in models:
            for p in prompts:
                for r in range(repeats):
                    for a in arms:
                        key = f"{prefix}-{t.host}-{m}-{p}-{r}-{a}"
                        out.append(spec(key, a, target=t, model=m, prompt=p, repeat=r))
    return out
