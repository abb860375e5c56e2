"""The record's "Plain decoding against the machine's limit" section from a seeded store:
figures where the host's bandwidth and the runs' weight bytes are stored, "not measured"
where either is missing (runs and hosts recorded before they existed)."""

from __future__ import annotations

from specfleet.jobs.run import Target
from specfleet.report.record import record_markdown
from specfleet.store.store import open_store
from tests.store.factory import result, spec

TORCH = Target(host="cpu1", engine="torch", device="cpu")
MLX = Target(host="cpu1", engine="mlx", device="cpu")
OLD = Target(host="old1", engine="torch", device="cpu")


def _seed(store) -> str:
    specs = [spec(f"k-{t.host}-{t.engine}-{arm}-{r}", arm, target=t, repeat=r, matrix_id="ceil-1")
             for t in (TORCH, MLX, OLD) for r in range(3) for arm in ("plain", "graded", "hf")
             if arm != "hf" or t == TORCH]
    store.create_matrix("ceiling", {"name": "ceiling"}, specs, matrix_id="ceil-1")
    for s in specs:
        # 101 tokens, 100 after the prefill in 100/15 s: 15 tok/s; the MLX runs predate
        # weight bytes (no `weight_bytes` in their engine_config)
        # the hf peer decodes 100 tokens in 100/20 s: 20 tok/s
        config = {} if s.target.engine == "mlx" else {"weight_bytes": 514_000_000}
        store.record_result(result(s).model_copy(update={
            "token_ids": list(range(101)), "generated_tokens": 101,
            "decode_s": 100 / (20 if s.arm == "hf" else 15),
            "engine_config": {"policy": s.arm, **config}}))
    store.finish_matrix("ceil-1", "done")
    store.upsert_host({"name": "cpu1", "kind": "linux-cpu", "read_gb_per_s": 42.0})
    store.upsert_host({"name": "old1", "kind": "linux-cpu"})  # before the probe existed
    return "ceil-1"


def test_section_figures_and_not_measured(tmp_path):
    store = open_store(str(tmp_path / "s.db"))
    try:
        text = record_markdown(store, _seed(store), [])
    finally:
        store.close()
    assert "## Plain decoding against the machine's limit" in text
    # 42 GB/s / 514 MB = 81.7 tok/s; 15 / 81.7 = 18%
    assert ("| cpu1 | torch | cpu | m1 | plain (ours) | 3 | 15.00 | 514 MB | 42.0 GB/s | 81.7 "
            "| 18% | eager torch on CPU") in text
    assert ("| cpu1 | torch | cpu | m1 | hf (peer) | 3 | 20.00 | 514 MB | 42.0 GB/s | 81.7 "
            "| 24% |") in text
    assert ("| cpu1 | mlx | cpu | m1 | plain (ours) | 3 | 15.00 | not measured | 42.0 GB/s | "
            "not measured | not measured | not measured: weight bytes were not stored") in text
    assert ("| old1 | torch | cpu | m1 | plain (ours) | 3 | 15.00 | 514 MB | not measured | "
            "not measured | not measured | not measured: the host's read bandwidth") in text
    assert "graded" not in text.split("machine's limit")[1].split("## ")[0]  # drafting arms
