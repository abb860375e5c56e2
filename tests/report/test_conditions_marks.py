"""Host conditions in the reports: THROTTLED cells, and power mode / clocks as provenance."""

from __future__ import annotations

from types import SimpleNamespace

from specfleet.report.build import view_of_runs
from specfleet.report.results import runs_grid
from specfleet.report.tables import speedup_text
from specfleet.stats.provenance import differences
from specfleet.workers.conditions import HostConditions
from specfleet.workers.conditions.probe import run_fields


def run(arm: str = "graded", repeat: int = 0, **conditions) -> SimpleNamespace:
    reading = HostConditions(at=0.0, platform="linux", **conditions)
    return SimpleNamespace(
        host="h", engine="torch", device="cpu", model="m", prompt_name="p", arm=arm,
        repeat=repeat, status="done", tok_per_s=100.0 + repeat, loop_share=0.0, noisy=False,
        token_ids=[1, 2], output_text="ab", stop_reason="max_tokens", matrix_id="x",
        plan_order=repeat, weights_hash="w", prompt_hash="p", engine_config={},
        host_fingerprint="f", versions={}, job_id=None, generated_tokens=2, decode_s=0.02, proposed=0,
        accepted=0, finished_at=None, **run_fields(reading, reading),
    )


def test_a_change_of_power_mode_or_clock_cap_is_named_and_unknown_is_not() -> None:
    fast = run(cpu_governor="performance", cpu_max_mhz=3400.0, cpu_limit_mhz=3400.0)
    saving = run(cpu_governor="powersave", cpu_max_mhz=3400.0, cpu_limit_mhz=3400.0)
    capped = run(cpu_governor="performance", cpu_max_mhz=3400.0, cpu_limit_mhz=2000.0)
    assert differences([fast], [saving]) == ["power mode"]
    assert differences([fast], [capped]) == ["clocks"]
    assert differences([fast], [fast]) == []
    unknown = SimpleNamespace(**{**vars(fast), "conditions": None})
    assert differences([unknown], [saving]) == []  # nothing recorded on one side


def test_a_big_core_capped_on_a_big_little_cpu_is_a_clocks_difference() -> None:
    """GB10: the lowest ceiling is a small core's own max whatever the big cores do, so the
    capped core itself is compared; an uncapped one reads as a run stored before it was."""
    from specfleet.workers.conditions import CpuCap

    clocks = dict(cpu_governor="performance", cpu_max_mhz=3900.0, cpu_limit_mhz=2800.0)
    free = run(**clocks, cpu_cap=CpuCap(12, 2800.0, 2800.0))
    capped = run(**clocks, cpu_cap=CpuCap(0, 3000.0, 3900.0))
    before_the_field = run(**clocks)
    assert differences([free], [capped]) == ["clocks"]
    assert differences([free], [before_the_field]) == []


def test_a_throttled_plain_run_marks_the_cell_and_its_speedups() -> None:
    plain = [run("plain", 0), run("plain", 1, power_source="battery")]
    graded = [run("graded", 0), run("graded", 1)]
    view = view_of_runs("x", "x", plain + graded)
    plain_cell, graded_cell = view.cell("h/torch/cpu", "m", "p", "plain"), view.cell(
        "h/torch/cpu", "m", "p", "graded")
    assert plain_cell.throttled_runs == 1 and graded_cell.throttled_runs == 0
    assert speedup_text(plain_cell).endswith(" THROTTLED")
    assert "THROTTLED" in speedup_text(graded_cell).split()
    calm = view_of_runs("x", "x", [run("plain", 0), *graded])
    assert "THROTTLED" not in speedup_text(calm.cell("h/torch/cpu", "m", "p", "graded"))


def test_results_flag_a_throttled_run() -> None:
    grid = runs_grid([run(), run(low_power_mode=True)])
    (calm, hot) = grid.rows
    flags = grid.headers.index("flags")
    assert calm[flags] == "–" and hot[flags] == "throttled"
