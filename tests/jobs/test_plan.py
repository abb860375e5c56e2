"""Planning: rotating arm order, deterministic keys, selectors, token limits, prompt texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.jobs.batch import load_generate_job
from specfleet.jobs.plan import (
    drop_sourceless,
    peer_skips,
    plan_generate_runs,
    plan_runs,
    rotated,
    run_key,
)
from specfleet.jobs.run import Target
from specfleet.jobs.spec import MatrixSpec
from specfleet.jobs.spec_files import load_matrix_spec

TORCH = Target(host="here", engine="torch", device="cpu")
MLX = Target(host="here", engine="mlx", device="cpu")
MAC = Target(host="mac1", engine="mlx", device="metal")


@pytest.fixture
def prompt_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "prompts"
    directory.mkdir()
    (directory / "edit_fn.txt").write_text("Rename x to y.\n")
    (directory / "story.txt").write_text("Tell a story.\r\n\n")
    return directory


def spec(**fields) -> MatrixSpec:
    base = dict(name="t", models=["m"], prompts=[{"name": "p", "text": "Hi."}],
                arms=["plain", "graded", "gated"], repeats=3)
    return MatrixSpec.model_validate({**base, **fields})


def test_rotated() -> None:
    assert rotated([1, 2, 3], 0) == [1, 2, 3]
    assert rotated([1, 2, 3], 4) == [2, 3, 1]
    assert rotated([], 2) == []


def test_arms_back_to_back_in_rotating_order() -> None:
    runs = plan_runs(spec(), [TORCH], "mx")
    assert [(r.repeat, r.arm) for r in runs] == [
        (0, "plain"), (0, "graded"), (0, "gated"),
        (1, "graded"), (1, "gated"), (1, "plain"),
        (2, "gated"), (2, "plain"), (2, "graded"),
    ]


def test_every_arm_takes_every_position_once_per_three_repeats() -> None:
    runs = plan_runs(spec(arms=["plain", "graded", "gated", "fixed"], repeats=4), [TORCH], "mx")
    positions: dict[str, set[int]] = {}
    for i, run in enumerate(runs):
        positions.setdefault(run.arm, set()).add(i % 4)
    assert all(p == {0, 1, 2, 3} for p in positions.values())


def test_order_is_target_then_model_then_prompt_then_repeat() -> None:
    s = spec(models=["b", "a"], prompts=[{"name": "q", "text": "Q"}, {"name": "p", "text": "P"}],
             arms=["plain"], repeats=2)
    runs = plan_runs(s, [TORCH, MAC, MLX], "mx")
    order = [(r.target.label, r.model, r.prompt_name, r.repeat) for r in runs]
    assert order[:4] == [("here/mlx/cpu", "b", "q", 0), ("here/mlx/cpu", "b", "q", 1),
                         ("here/mlx/cpu", "b", "p", 0), ("here/mlx/cpu", "b", "p", 1)]
    assert [o[0] for o in order[::8]] == ["here/mlx/cpu", "here/torch/cpu", "mac1/mlx/metal"]
    assert len(runs) == 3 * 2 * 2 * 2


def test_run_keys_are_deterministic_unique_and_matrix_specific() -> None:
    first = [r.run_key for r in plan_runs(spec(), [TORCH, MLX], "m-1")]
    again = [r.run_key for r in plan_runs(spec(), [MLX, TORCH, MLX], "m-1")]
    other = {r.run_key for r in plan_runs(spec(), [TORCH, MLX], "m-2")}
    assert first == again
    assert len(set(first)) == len(first) == 18
    assert not other & set(first)
    assert run_key("m", "h", 0) == run_key("m", "h", 0) != run_key("m", "h", "0")
    assert len(first[0]) == 32 and int(first[0], 16) >= 0


def test_selector_filters_by_engine_host_device_and_kind() -> None:
    targets = [TORCH, MLX, MAC]
    labels = lambda runs: sorted({r.target.label for r in runs})  # noqa: E731
    assert labels(plan_runs(spec(targets={"engines": ["mlx"]}), targets, "x")) == [
        "here/mlx/cpu", "mac1/mlx/metal"]
    assert labels(plan_runs(spec(targets={"devices": ["metal"]}), targets, "x")) == [
        "mac1/mlx/metal"]
    assert labels(plan_runs(spec(targets={"hosts": ["here"], "engines": ["torch"]}),
                            targets, "x")) == ["here/torch/cpu"]
    kinds = {"here": "linux-cpu", "mac1": "mac-mlx"}
    assert labels(plan_runs(spec(targets={"kinds": ["mac-mlx"]}), targets, "x",
                            host_kinds=kinds)) == ["mac1/mlx/metal"]


def test_selector_matching_nothing_is_one_line() -> None:
    with pytest.raises(UserError, match=r"^matrix 't': targets: no target matches "
                       r"\(devices in \[cuda\]\); the fleet has: here/mlx/cpu, here/torch/cpu$"):
        plan_runs(spec(targets={"devices": ["cuda"]}), [TORCH, MLX], "x")
    with pytest.raises(UserError, match="no target matches"):
        plan_runs(spec(targets={"kinds": ["gb10-cuda"]}), [TORCH], "x")  # kind unknown


def test_per_prompt_and_per_engine_max_tokens() -> None:
    s = spec(max_tokens={"default": 100, "mlx": 30}, arms=["plain"], repeats=1, prompts=[
        {"name": "a", "text": "A"},
        {"name": "b", "text": "B", "max_tokens": 800},
        {"name": "c", "text": "C", "max_tokens": {"mlx": 50}},
    ])
    got = {(r.target.engine, r.prompt_name): r.max_tokens for r in plan_runs(s, [TORCH, MLX], "x")}
    assert got == {("torch", "a"): 100, ("torch", "b"): 800, ("torch", "c"): 100,
                   ("mlx", "a"): 30, ("mlx", "b"): 800, ("mlx", "c"): 50}


def test_prompt_level_targets_restrict_a_prompt() -> None:
    s = spec(arms=["plain"], repeats=1, prompts=[
        {"name": "long", "text": "L", "targets": {"engines": ["torch"]}},
        {"name": "short", "text": "S"},
    ])
    got = [(r.target.engine, r.prompt_name) for r in plan_runs(s, [TORCH, MLX], "x")]
    assert got == [("mlx", "short"), ("torch", "long"), ("torch", "short")]


def test_prompt_text_from_files_and_model_suffix(tmp_path: Path, prompt_dir: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("name: t\nmodels: [qwen, llama]\nprompts: [edit_fn, story]\n"
                    "arms: [plain]\nrepeats: 1\nprompt_suffix: {qwen: ' /no_think'}\n")
    loaded = load_matrix_spec(path, prompt_dir)
    texts = {(r.model, r.prompt_name): r.prompt_text for r in plan_runs(loaded, [TORCH], "x")}
    assert texts == {("qwen", "edit_fn"): "Rename x to y. /no_think",
                     ("qwen", "story"): "Tell a story. /no_think",
                     ("llama", "edit_fn"): "Rename x to y.", ("llama", "story"): "Tell a story."}


def test_missing_prompt_file_at_plan_time_is_one_line(tmp_path: Path) -> None:
    s = spec(prompts=["gone"])
    with pytest.raises(UserError, match=r"^prompts: no prompt file 'gone.txt' in "):
        plan_runs(s, [TORCH], "x", prompt_dir=tmp_path)


def test_run_fields_carry_the_spec() -> None:
    s = spec(arms=["plain", {"arm": "fixed", "max_draft": 5}], repeats=1, temperature=0.5,
             seed=7, chat=False, loop_guard="1,8,4")
    plain, fixed = plan_runs(s, [TORCH], "mx")
    assert (fixed.arm, fixed.lookup.max_draft, fixed.lookup.adaptive) == ("fixed", 5, False)
    assert plain.lookup.max_draft == 7 and plain.lookup.adaptive
    for run in (plain, fixed):
        assert (run.matrix_id, run.temperature, run.seed, run.chat) == ("mx", 0.5, 7, False)
        assert (run.loop_guard.min_period, run.loop_guard.max_period) == (1, 8)


def test_generate_batch_runs(tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    path.write_text('{"prompt": "One"}\n\n{"name": "two", "prompt": "Two", "max_tokens": 9}\n')
    job = load_generate_job(path, model="m", target="here/torch", policy="fixed", max_tokens=50)
    runs = plan_generate_runs(job, TORCH, "job-1")
    assert [(r.prompt_name, r.prompt_text, r.max_tokens) for r in runs] == [
        ("line-1", "One", 50), ("two", "Two", 9)]
    assert all(r.arm == "fixed" and not r.lookup.adaptive for r in runs)
    assert runs[0].run_key == plan_generate_runs(job, TORCH, "job-1")[0].run_key


def test_peer_arms_run_on_their_engine_only_rotating_with_the_arms_there() -> None:
    both = spec(arms=["plain", "hf-lookup", "mlx-lm"], repeats=2)
    runs = plan_runs(both, [TORCH, MLX], "mx")
    by_target = {t.engine: [(r.repeat, r.arm) for r in runs if r.target == t] for t in (TORCH, MLX)}
    assert by_target == {
        "torch": [(0, "plain"), (0, "hf-lookup"), (1, "hf-lookup"), (1, "plain")],
        "mlx": [(0, "plain"), (0, "mlx-lm"), (1, "mlx-lm"), (1, "plain")],
    }
    lookup = next(r.lookup for r in runs if r.arm == "hf-lookup")
    assert (lookup.ngram_min, lookup.ngram_max, lookup.max_draft, lookup.adaptive) == (1, 2, 10,
                                                                                        False)
    assert peer_skips(both, [MLX, TORCH]) == [
        "arm hf-lookup runs on torch targets only: skipped on here/mlx/cpu",
        "arm mlx-lm runs on mlx targets only: skipped on here/torch/cpu",
    ]


def test_llama_cpp_runs_on_torch_and_mlx_targets_alike() -> None:
    both = spec(arms=["plain", {"arm": "llama.cpp-lookup", "max_draft": 6}], repeats=1)
    runs = plan_runs(both, [TORCH, MLX], "mx")
    assert sorted((r.target.engine, r.arm) for r in runs) == [
        ("mlx", "llama.cpp-lookup"), ("mlx", "plain"),
        ("torch", "llama.cpp-lookup"), ("torch", "plain")]
    assert peer_skips(both, [MLX, TORCH]) == []


def test_a_peer_arm_that_fits_no_selected_target_is_refused_at_submit() -> None:
    with pytest.raises(UserError, match=r"^matrix 't': arms\[1\]: hf runs on torch targets "
                       r"only, and none is selected \(here/mlx/cpu, mac1/mlx/metal\)$"):
        plan_runs(spec(arms=["plain", "hf"]), [MLX, MAC], "mx")


def test_a_cell_whose_alias_has_no_source_for_its_engine_is_left_out() -> None:
    # An MLX-only alias in a matrix open to every engine: its torch runs could only fail.
    runs = plan_runs(spec(models=["q4", "m"]), [TORCH, MLX, MAC], "mx")
    kept, lines = drop_sourceless(runs, [("q4", "torch")], "matrix 't'")
    assert lines == ["model q4 has no torch source: skipped on here/torch/cpu"]
    assert {(r.model, r.target.engine) for r in kept} == {("q4", "mlx"), ("m", "torch"),
                                                          ("m", "mlx")}
    assert len(kept) == len(runs) - 3 * 3  # one cell's three arms x three repeats
    assert drop_sourceless(runs, [], "matrix 't'") == (runs, [])
    with pytest.raises(UserError, match="matrix 't': no target of this fleet runs any of its "
                                        "models"):
        drop_sourceless(plan_runs(spec(models=["q4"]), [TORCH], "mx"), [("q4", "torch")],
                        "matrix 't'")
