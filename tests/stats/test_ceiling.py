"""Plain decode rate against the bandwidth ceiling (`stats/ceiling.py`), exact figures."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specfleet.stats.ceiling import decode_ceilings, share_why


def _run(host="h", engine="torch", device="cpu", model="m", arm="plain", decode_s=10.0,
         weight_bytes: int | None = 500_000_000, noisy=False):
    config = {"weight_bytes": weight_bytes} if weight_bytes is not None else {"k": 1}
    return SimpleNamespace(host=host, engine=engine, device=device, model=model, arm=arm,
                           generated_tokens=101, decode_s=decode_s, engine_config=config,
                           noisy=noisy)


def test_ceiling_and_share_from_the_median_plain_run():
    runs = [_run(decode_s=s) for s in (10.0, 5.0, 20.0)] + [_run(arm="graded", decode_s=1.0)]
    (row,) = decode_ceilings(runs, {"h": 40.0})
    assert row.runs == 3 and row.decode_tok_per_s == pytest.approx(10.0)  # 100 / 10 s
    assert row.ceiling_tok_per_s == pytest.approx(80.0)  # 40 GB/s / 500 MB
    assert row.share == pytest.approx(0.125)
    assert row.why == share_why(0.125, "torch") and "eager torch" in row.why


def test_plainly_decoding_peers_get_rows_of_their_own_drafting_ones_none():
    runs = [_run(), _run(arm="hf", decode_s=5.0), _run(arm="hf-lookup", decode_s=1.0),
            _run(engine="mlx", arm="mlx-lm")]
    rows = decode_ceilings(runs, {"h": 40.0})
    assert [(r.engine, r.arm) for r in rows] == [("mlx", "mlx-lm"), ("torch", "plain"),
                                                 ("torch", "hf")]
    assert rows[2].share == pytest.approx(0.25)  # 20 tok/s of 80


def test_missing_facts_are_not_measured_never_guessed():
    runs = [_run(host="old"), _run(host="h", engine="mlx", weight_bytes=None),
            _run(host="h", device="cuda"), _run(host="h", engine="toy", weight_bytes=None)]
    rows = {(r.host, r.engine, r.device): r for r in decode_ceilings(runs, {"h": 40.0})}
    assert set(rows) == {("old", "torch", "cpu"), ("h", "mlx", "cpu"), ("h", "torch", "cuda")}
    assert all(r.share is None and r.ceiling_tok_per_s is None for r in rows.values())
    assert rows["old", "torch", "cpu"].why.startswith("not measured: the host's read bandwidth")
    assert rows["h", "mlx", "cpu"].why.startswith("not measured: weight bytes")
    assert "cuda" in rows["h", "torch", "cuda"].why


def test_a_faster_probe_a_run_stored_sets_its_hosts_ceiling_for_every_row():
    # The worker probes again before its first quiet run; the host row keeps the probe
    # taken while Ray was starting. Noise only slows a probe: the faster one is the ceiling.
    quiet = _run()
    quiet.engine_config["read_gb_per_s"] = 50.0
    slower = _run(arm="hf")
    slower.engine_config["read_gb_per_s"] = 30.0
    rows = decode_ceilings([quiet, _run(), slower, _run(host="g")], {"h": 40.0, "g": 40.0})
    by = {(r.host, r.arm): r for r in rows}
    assert by["h", "plain"].read_gb_per_s == by["h", "hf"].read_gb_per_s == 50.0
    assert by["h", "plain"].ceiling_tok_per_s == pytest.approx(100.0)  # 50 GB/s / 500 MB
    assert by["g", "plain"].read_gb_per_s == 40.0  # another host's runs say nothing of g
    (unrecorded,) = decode_ceilings([quiet], {})  # a host row without a probe
    assert unrecorded.read_gb_per_s == 50.0


def test_a_gpu_target_is_measured_against_its_own_memory_never_the_hosts():
    gpu = _run(device="cuda", engine="torch", decode_s=1.0)  # 100 tok/s
    gpu.engine_config["read_gb_per_s"] = 250.0  # the worker's CUDA probe
    cpu = _run()
    cpu.engine_config["read_gb_per_s"] = 60.0
    older_gpu = _run(host="g", device="cuda")  # stored before device probes
    rows = {(r.host, r.device): r for r in decode_ceilings([gpu, cpu, older_gpu],
                                                           {"h": 40.0, "g": 40.0})}
    assert rows["h", "cuda"].read_gb_per_s == 250.0
    assert rows["h", "cuda"].ceiling_tok_per_s == pytest.approx(500.0)  # 250 GB/s / 500 MB
    assert rows["h", "cuda"].share == pytest.approx(0.2)
    assert "torch on CPU" not in rows["h", "cuda"].why and "per-step overhead" in rows["h", "cuda"].why
    assert rows["h", "cpu"].read_gb_per_s == 60.0
    assert rows["g", "cuda"].share is None and "cuda device's own memory" in rows["g", "cuda"].why


def test_noisy_runs_say_the_share_is_unreliable():
    (row,) = decode_ceilings([_run(noisy=True), _run(), _run()], {"h": 40.0})
    assert row.why.startswith("1 of 3 runs noisy (host busy): share unreliable; eager torch")


def test_why_by_share():
    assert share_why(1.2, "torch").startswith("above the ceiling")
    assert share_why(0.8, "mlx").startswith("near the limit")
    assert share_why(0.5, "mlx").startswith("per-step overhead")
    assert "MLX" in share_why(0.1, "mlx")


def test_a_llama_cpp_peer_is_priced_on_its_own_weights_and_says_why_of_its_own():
    runs = [_run(), _run(arm="llama.cpp", decode_s=2.0, weight_bytes=100_000_000),
            _run(arm="llama.cpp-lookup", decode_s=1.0, weight_bytes=100_000_000)]
    rows = {r.arm: r for r in decode_ceilings(runs, {"h": 40.0})}
    assert set(rows) == {"plain", "llama.cpp"}  # its lookup drafts: no ceiling row
    assert rows["llama.cpp"].ceiling_tok_per_s == pytest.approx(400.0)  # 40 GB/s / 100 MB
    assert rows["llama.cpp"].share == pytest.approx(0.125)  # 50 tok/s of 400
    assert rows["llama.cpp"].why.startswith("llama.cpp on the worker's threads")
    assert "eager torch" in rows["plain"].why


def test_a_reply_of_one_token_has_no_decode_rate_and_does_not_lower_the_median():
    """(generated - 1) / decode_s is 0.0, "not measured", for a one-token reply. Pooled over
    a model's prompts, 3 such replies among 6 plain runs halved the median (5 tok/s, a 6%
    share: "something else sets the pace") where every measured run decoded 10 tok/s."""
    short = [_run() for _ in range(3)]
    for run in short:
        run.generated_tokens = 1
    (row,) = decode_ceilings([_run() for _ in range(3)] + short, {"h": 40.0})
    assert (row.runs, row.decode_tok_per_s) == (6, pytest.approx(10.0))
    assert row.share == pytest.approx(0.125)
    assert row.why.startswith("3 of 6 runs have no decode rate (a one-token reply), left out; ")
    (none,) = decode_ceilings(short, {"h": 40.0})
    assert (none.decode_tok_per_s, none.ceiling_tok_per_s, none.share) == (0.0, None, None)
    assert none.why == "not measured: no plain run decoded past its first token"
