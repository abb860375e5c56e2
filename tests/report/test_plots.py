"""The colours of arms in plots come from the registries (a policy's and a peer's own class)."""

from __future__ import annotations

from specfleet.engine.peers import PEER_KINDS
from specfleet.engine.policies import POLICIES
from specfleet.jobs.run import ARMS
from specfleet.report.plots import arm_color


def test_every_arm_has_its_own_colour():
    colours = {arm: arm_color(arm) for arm in ARMS}
    assert len(set(colours.values())) == len(ARMS), colours
    assert "#333333" not in colours.values()  # the grey for an arm no registry names


def test_a_policy_and_a_peer_are_drawn_in_the_colour_their_class_declares():
    for name, cls in POLICIES.items():
        assert arm_color(name) == cls.color
    for name, kind in PEER_KINDS.items():
        assert arm_color(name) == kind.color
    assert arm_color("no-such-arm") == "#333333"


def test_plots_of_a_target_show_only_the_prompts_and_arms_it_ran(tmp_path, monkeypatch):
    # The demo keeps edit_fn and hf-lookup to torch: on the MLX target an empty edit_fn column
    # was drawn grey (the legend's "loop") and the runs plot's tick sat off its group.
    from types import SimpleNamespace

    import specfleet.report.plots as plots

    def cell(rate):
        return SimpleNamespace(speedup=rate / 10, verdict="within noise", spread_flag=False,
                               loop=False, parity="identical", rates=[rate], median_tok_per_s=rate)

    ran = {("m", "story", "plain"): cell(10.0), ("m", "story", "calibrated"): cell(9.7)}
    view = SimpleNamespace(models=["m"], prompts=["story", "edit_fn"],
                           arms=["plain", "calibrated", "hf-lookup"],
                           lookup_arms=["calibrated", "hf-lookup"],
                           cell=lambda target, m, p, a: ran.get((m, p, a)))
    pyplot = plots._pyplot()
    axes = []
    subplots = pyplot.subplots

    def keep(*args, **kwargs):
        fig, ax = subplots(*args, **kwargs)
        axes.append(ax)
        return fig, ax

    monkeypatch.setattr(pyplot, "subplots", keep)
    plots.speedup_heatmap(view, "h/mlx/cpu", tmp_path / "speedup.png")
    plots.run_scatter(view, "h/mlx/cpu", tmp_path / "runs.png")
    heat, runs = axes
    assert [t.get_text() for t in heat.get_xticklabels()] == ["story"]
    assert [t.get_text() for t in heat.get_yticklabels()] == ["m · calibrated"]
    assert [t.get_text() for t in runs.get_xticklabels()] == ["m\nstory"]
    # Two arms ran: plain's median bar left of the tick, calibrated's right of it.
    bars = sorted(c.get_segments()[0][0][0] for c in runs.collections  # each bar's left end
                  if hasattr(c, "get_segments") and c.get_segments())
    assert bars[0] < 0 < bars[-1] and len(bars) == 2
