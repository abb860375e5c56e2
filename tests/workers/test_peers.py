"""Peer arms on the bundled model through the worker path: planned from a matrix, run by a
real `HostWorker` beside our plain arm, stored, and read back as arms with parity.

Short prompt, few tokens: the torch peers share one loaded model with our plain arm, and
mlx-lm shares the MLX one.
"""

from __future__ import annotations

import importlib.metadata
import re

import pytest

from specfleet.engine.stats import COUNTER_FIELDS
from specfleet.jobs.plan import plan_runs
from specfleet.jobs.run import RunSpec, Target
from specfleet.jobs.spec import MatrixSpec
from specfleet.report.results import render_matrix
from specfleet.stats.view import view_of_runs
from specfleet.store.store import open_store
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker
from tests.engine.conftest import bundled_model  # noqa: F401 (the fetched bundled model)

pytestmark = pytest.mark.slow

TORCH = Target(host="box1", engine="torch", device="cpu")
MLX = Target(host="box1", engine="mlx", device="cpu")
MATRIX = {
    "name": "peers", "models": ["smollm2-135m"],
    "prompts": [{"name": "kite", "text": "The red kite is a bird of prey that"}],
    "arms": ["plain", "hf", {"arm": "hf-lookup", "max_draft": 4}, "mlx-lm"], "repeats": 1,
    "max_tokens": {"torch": 10, "mlx": 5}, "loop_guard": "1,32,4",
    "chat": False,  # a 9-token prompt: MLX's CPU backend prefills ~10 tok/s here
}


@pytest.fixture(scope="module")
def worker(tmp_path_factory, bundled_model):  # noqa: F811
    import torch

    # One OpenMP thread: on this shared 2-core box two wait on each other (tests/engine/conftest).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lock = str(tmp_path_factory.mktemp("lock") / "active-run.lock")
    w = HostWorker(info=detect_host("box1"), sample_period_s=3600.0, run_lock_path=lock)
    yield w
    w.close()
    torch.set_num_threads(threads)


def run_and_store(worker: HostWorker, target: Target, tmp_path,
                  matrix: dict = MATRIX) -> tuple[list, str]:
    planned = plan_runs(MatrixSpec.model_validate(matrix), [TORCH, MLX], "m-peers")
    runs = [run for run in planned if run.target == target]
    results = [worker.run(spec) for spec in runs]
    with open_store(f"sqlite:///{tmp_path / 'peers.db'}") as store:
        store.create_matrix("peers", matrix, runs, matrix_id="m-peers")
        for result in results:
            store.record_result(result)
        stored = store.runs(matrix="m-peers")
        table = render_matrix(store, "m-peers", "markdown")
    return stored, table


def check_peer(row, library: str) -> None:
    assert row.status == "done", row.error
    assert row.engine_config["peer"]["library"] == library
    assert row.engine_config["peer"]["version"] == importlib.metadata.version(library)
    assert row.resolved_policy == row.arm and row.engine_config["lookup"] is None
    assert row.prefill_s > 0 and row.decode_s > 0 and row.total_s > 0 and row.tok_per_s > 0
    assert row.warmup_s > 0  # warmed once, untimed, like our arms
    assert all(getattr(row, name) is None for name in COUNTER_FIELDS)  # stored empty, not zero


@pytest.mark.torch
def test_hf_and_hf_lookup_run_on_our_loaded_model_and_reply_as_our_plain(worker, tmp_path):
    stored, table = run_and_store(worker, TORCH, tmp_path)
    by_arm = {row.arm: row for row in stored}
    assert sorted(by_arm) == ["hf", "hf-lookup", "plain"]
    for arm in ("hf", "hf-lookup"):
        check_peer(by_arm[arm], "transformers")
    assert by_arm["hf-lookup"].engine_config["peer"]["prompt_lookup_num_tokens"] == 4
    # float32 on CPU: transformers' greedy generate and our plain decoding agree to the token.
    assert by_arm["hf"].token_ids == by_arm["plain"].token_ids
    view = view_of_runs("m-peers", "peers", stored)
    parity = {c.arm: c.parity for c in view.cells}
    assert parity == {"plain": "identical", "hf": "identical", "hf-lookup": "identical"}
    assert all(c.speedup and c.speedup > 0 for c in view.cells if c.arm != "plain")
    (loaded,) = worker.status()["loaded_models"]  # one model held for all three arms
    assert loaded["runs"] == 3 and loaded["warmed_peers"] == ["hf-lookup:4:2", "hf:None:None"]
    # The tables show them as arms: speed-up over our plain, parity, no counters, a headline.
    assert re.search(r"\| hf-lookup \| 10 \| – \| – \| – \| – \| – \| identical \|", table)
    assert re.search(r"Against peers: plain [\d.]+x hf(-lookup)? \(geometric-mean", table)


@pytest.mark.mlx
def test_mlx_lm_runs_on_our_loaded_model_and_replies_as_our_plain(worker, tmp_path):
    stored, table = run_and_store(worker, MLX, tmp_path)
    by_arm = {row.arm: row for row in stored}
    assert sorted(by_arm) == ["mlx-lm", "plain"]
    check_peer(by_arm["mlx-lm"], "mlx-lm")
    assert by_arm["mlx-lm"].token_ids == by_arm["plain"].token_ids
    assert re.search(r"Against peers: plain [\d.]+x mlx-lm", table)  # plain: our only arm


@pytest.mark.torch
def test_llama_cpp_runs_the_models_gguf_beside_our_plain(worker, tmp_path):
    pytest.importorskip("llama_cpp", reason="make test installs specfleet[llamacpp]")
    matrix = {**MATRIX, "arms": ["plain", "llama.cpp", {"arm": "llama.cpp-lookup", "max_draft": 4}],
              "prompts": [{"name": "list", "text": "Copy this list: red, green, blue, red, "
                                                   "green, blue. Copy: red, green, blue,"}]}
    stored, table = run_and_store(worker, TORCH, tmp_path, matrix)
    by_arm = {row.arm: row for row in stored}
    assert sorted(by_arm) == ["llama.cpp", "llama.cpp-lookup", "plain"]
    for arm in ("llama.cpp", "llama.cpp-lookup"):
        check_peer(by_arm[arm], "llama-cpp-python")
        assert len(by_arm[arm].token_ids) == 10  # max_tokens, each one a real id
    lookup = by_arm["llama.cpp-lookup"].engine_config["peer"]
    assert (lookup["num_pred_tokens"], lookup["max_ngram_size"]) == (4, 2)
    assert lookup["gguf"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    # A plain step of it reads the GGUF's 4-bit tensors (~97 MB), not our float32 (~514 MB).
    gguf_bytes = by_arm["llama.cpp"].engine_config["weight_bytes"]
    assert 90e6 < gguf_bytes < by_arm["plain"].engine_config["weight_bytes"] / 4
    # Both prefill the prompt alike, so their first token agrees (later ones may not: its
    # batched verify rounds Q4_1 differently from one-row steps, docs/engine.md "Peer arms").
    assert by_arm["llama.cpp-lookup"].token_ids[0] == by_arm["llama.cpp"].token_ids[0]
    # The Q4_1 GGUF against our float32 copy of it: parity is reported, whatever it is.
    parity = {c.arm: c.parity for c in view_of_runs("m-peers", "peers", stored).cells}
    assert parity["llama.cpp"] is not None and parity["llama.cpp-lookup"] is not None
    assert re.search(r"Against peers: plain [\d.]+x llama\.cpp(-lookup)? \(geometric-mean", table)


@pytest.mark.mlx
def test_llama_cpp_runs_beside_our_mlx_plain_too(worker, tmp_path):
    pytest.importorskip("llama_cpp", reason="make test installs specfleet[llamacpp]")
    matrix = {**MATRIX, "arms": ["plain", "llama.cpp"]}
    stored, _ = run_and_store(worker, MLX, tmp_path, matrix)
    by_arm = {row.arm: row for row in stored}
    assert sorted(by_arm) == ["llama.cpp", "plain"]
    check_peer(by_arm["llama.cpp"], "llama-cpp-python")
    assert by_arm["llama.cpp"].engine == "mlx" and len(by_arm["llama.cpp"].token_ids) == 5


def test_a_peer_sent_to_another_engines_target_fails_in_one_line(worker):
    spec = RunSpec(run_key="misplaced", target=Target(host="box1", engine="toy", device="cpu"),
                   model="script", prompt_name="p", prompt_text="hello hello", arm="hf",
                   max_tokens=4)
    result = worker.run(spec)
    assert (result.status, result.error) == (
        "failed", "arm hf runs on torch targets only, not on toy")
