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


def _kept_axes(monkeypatch) -> list:
    """The axes of every figure the plots draw from now on, kept for the test to read."""
    import specfleet.report.plots as plots

    pyplot = plots._pyplot()
    axes = []
    subplots = pyplot.subplots

    def keep(*args, **kwargs):
        fig, ax = subplots(*args, **kwargs)
        axes.append(ax)
        return fig, ax

    monkeypatch.setattr(pyplot, "subplots", keep)
    return axes


def test_plots_of_a_target_show_only_the_prompts_and_arms_it_ran(tmp_path, monkeypatch):
    # The demo keeps edit_fn and hf-lookup to torch: on the MLX target an empty edit_fn column
    # was drawn grey (the legend's "loop") and the runs plot's tick sat off its group.
    from types import SimpleNamespace

    import specfleet.report.plots as plots

    def cell(rate):
        return SimpleNamespace(speedup=rate / 10, verdict="within noise", spread_flag=False,
                               loop=False, parity="identical", rates=[rate], median_tok_per_s=rate,
                               no_verdict_n=None, throttled=False)

    ran = {("m", "story", "plain"): cell(10.0), ("m", "story", "calibrated"): cell(9.7)}
    view = SimpleNamespace(models=["m"], prompts=["story", "edit_fn"],
                           arms=["plain", "calibrated", "hf-lookup"],
                           lookup_arms=["calibrated", "hf-lookup"],
                           cell=lambda target, m, p, a: ran.get((m, p, a)))
    axes = _kept_axes(monkeypatch)
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


def _runs(arm: str, rates: list[float], prompt: str = "code") -> list:
    from types import SimpleNamespace

    return [SimpleNamespace(host="h", engine="toy", device="cpu", model="m", prompt_name=prompt,
                            arm=arm, repeat=i, status="done", tok_per_s=rate, token_ids=[1, 2])
            for i, rate in enumerate(rates)]


def _view(**rates: tuple[list[float], list[float]]):
    """The view of plain and graded runs at these rates per prompt."""
    from specfleet.stats.view import view_of_runs

    runs = [run for prompt, (plain, graded) in rates.items()
            for run in (*_runs("plain", plain, prompt), *_runs("graded", graded, prompt))]
    return view_of_runs("x", "x", runs)


def _heatmap(tmp_path, monkeypatch, **rates: tuple[list[float], list[float]]):
    """The view of plain and graded runs at these rates per prompt, and its heatmap's axes."""
    import specfleet.report.plots as plots

    view = _view(**rates)
    axes = _kept_axes(monkeypatch)
    plots.speedup_heatmap(view, "h/toy/cpu", tmp_path / "speedup.png")
    (heat,) = axes
    return view, heat


def test_a_heatmap_cell_says_its_verdict_not_only_its_colour(tmp_path, monkeypatch):
    # A 0.99x loss and a 1.00x cell within noise were the same yellow; only `~` told them apart.
    _, heat = _heatmap(tmp_path, monkeypatch, code=([100.0, 100.2, 99.8], [99.0, 99.1, 98.9]),
                       story=([100.0, 101.0, 99.0], [100.0, 102.0, 98.5]))
    assert [t.get_text() for t in heat.texts] == ["0.99x\n▼", "1.00x\n~"]


def test_a_heatmap_cell_under_three_repeats_says_n_and_no_verdict(tmp_path, monkeypatch):
    # A speed-up from one run was drawn as unmarked as a 1.50x gain from three.
    import specfleet.report.plots as plots

    view, heat = _heatmap(tmp_path, monkeypatch, code=([100.0, 101.0, 99.0], [150.0, 152.0, 148.0]),
                          story=([100.0], [140.0, 142.0]))
    assert [t.get_text() for t in heat.texts] == ["1.50x\n▲", "1.41x\nn=1"]
    assert heat.get_title().endswith(
        "n=1 (hatched blue-grey): under 3 repeats a side, no verdict")
    assert [(p.get_x(), p.get_hatch()) for p in heat.patches] == [(0.5, "//")]  # story only
    gain, single = (view.cell("h/toy/cpu", "m", p, "graded") for p in ("code", "story"))
    assert (plots.cell_label(gain), plots.cell_label(single)) == ("1.50x\n▲", "1.41x\nn=1")
    assert plots.heat_legend([gain]) == ("▲ gain  ▼ loss (colour: its size)  ~ within noise "
                                         "(grey)\n! spread>5%  L loop (grey)  ≠ diverged")
    assert plots.heat_legend([gain, single]).endswith(
        "\nn=1 (hatched blue-grey): under 3 repeats a side, no verdict")


def fill_under(heat, text):
    """The colour a heatmap cell's text sits on: the cell's own patch (a speed-up that is no
    gain or loss, a loop) where it has one, else the colour scale's under it."""
    from matplotlib.colors import to_hex

    j, i = (round(v) for v in text.get_position())
    for patch in heat.patches:
        if (patch.get_x(), patch.get_y()) == (j - 0.5, i - 0.5):
            return patch.get_facecolor()
    (image,) = heat.get_images()
    rgba = image.to_rgba(image.get_array()[i, j])
    assert to_hex(rgba, keep_alpha=True) != "#00000000", text.get_text()  # no NaN under it
    return rgba


def test_a_heatmap_cell_is_coloured_by_its_verdict_as_on_the_web_view(tmp_path, monkeypatch):
    # A 0.85x within noise was as orange as a 0.85x loss; the web view greys it: only a gain
    # or a loss has a size worth a colour.
    from matplotlib.colors import to_hex

    import specfleet.report.plots as plots
    from specfleet.serve.svg import speedup_fill

    plain = [100.0, 101.0, 99.0]
    view, heat = _heatmap(tmp_path, monkeypatch, code=(plain, [84.0, 85.0, 86.0]),
                          prose=(plain, [70.0, 85.0, 100.0]), story=([100.0], [85.0, 86.0]))
    assert [t.get_text() for t in heat.texts] == ["0.85x\n▼", "0.85x\n~ !", "0.85x\nn=1"]
    loss, noise, single = (to_hex(fill_under(heat, t)) for t in heat.texts)
    assert (noise, single) == (plots.WITHIN_NOISE_FILL, plots.NO_VERDICT_FILL)
    red, green, blue = (int(loss[k:k + 2], 16) for k in (1, 3, 5))
    assert red > 2 * max(green, blue)  # the loss keeps its size's colour: the scale's end
    cells = [view.cell("h/toy/cpu", "m", p, "graded") for p in ("code", "prose", "story")]
    # The web view greys exactly the cells the PNG greys, in the same greys.
    assert [speedup_fill(c) for c in cells[1:]] == [noise, single]
    assert speedup_fill(cells[0]).startswith("hsl(4,")  # red: a loss


def test_a_throttled_cell_is_marked_on_the_heatmap_as_in_the_tables(tmp_path, monkeypatch):
    # The tables read THROTTLED; the heatmap drew the same cell as an unmarked gain.
    from dataclasses import replace

    import specfleet.report.plots as plots

    view, _ = _heatmap(tmp_path, monkeypatch, code=([100.0, 101.0, 99.0], [150.0, 152.0, 148.0]))
    gain = view.cell("h/toy/cpu", "m", "code", "graded")
    throttled = replace(gain, throttled=True)
    assert plots.cell_label(throttled) == "1.50x\n▲ T"
    assert plots.heat_legend([gain]).count("\n") == 1  # no T line where no cell is throttled
    assert plots.heat_legend([gain, throttled]).endswith(
        "\nT throttled: a run of the cell or of its plain ran on a throttled host")


def test_colour_bar_ticks_are_round_speed_ups_mirrored_about_one():
    # The ticks were the bar's ends and even steps between: 0.09x 0.31x 1.00x 3.28x 10.73x.
    import numpy as np

    from specfleet.report.plots import bar_ticks

    assert [round(t, 2) for t in bar_ticks(np.log2(10.73))] == [0.1, 0.33, 1.0, 3.0, 10.0]
    assert [round(t, 2) for t in bar_ticks(np.log2(3.04))] == [0.33, 0.67, 1.0, 1.5, 3.0]
    assert [round(t, 2) for t in bar_ticks(np.log2(1.1))] == [0.91, 0.95, 1.0, 1.05, 1.1]


def _long_named_view():
    from types import SimpleNamespace

    from specfleet.stats.view import view_of_runs

    runs = [SimpleNamespace(host="h", engine="toy", device="cpu", model=model, prompt_name=prompt,
                            arm=arm, repeat=i, status="done", tok_per_s=rate, token_ids=[1, 2])
            for model in ("mlx-community/Qwen3-1.7B-4bit", "google/gemma-3-270m-it")
            for prompt in ("edit_fn", "summary_of_a_long_report", "story")
            for arm, base in (("plain", 100.0), ("calibrated", 150.0), ("llama.cpp-lookup", 120.0))
            for i, rate in enumerate((base, base + 1, base - 1))]
    return view_of_runs("x", "x", runs)


def _overlaps(labels) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_text()]
    pairs = zip(boxes, boxes[1:], strict=False)  # each label and the next
    return [(a, b) for (a, box_a), (b, box_b) in pairs if box_a.overlaps(box_b)]


def test_long_model_and_prompt_names_do_not_run_into_each_other(tmp_path, monkeypatch):
    # Groups and columns had a fixed width: "mlx-community/Qwen3-1.7B-4bit" ran into the
    # next group's name, and the heatmap's prompt names into each other.
    import specfleet.report.plots as plots

    view = _long_named_view()
    axes = _kept_axes(monkeypatch)
    plots.speedup_heatmap(view, "h/toy/cpu", tmp_path / "speedup.png")
    plots.run_scatter(view, "h/toy/cpu", tmp_path / "runs.png")
    heat, runs = axes
    assert _overlaps(heat.get_xticklabels()) == []
    assert _overlaps(runs.get_xticklabels()) == []


def test_the_runs_plot_says_what_a_bar_is_and_keeps_its_legend_off_the_dots(tmp_path,
                                                                            monkeypatch):
    # The legend sat inside the axes ("best") over a group's dots, the median bar was
    # explained nowhere, and an arm whose first cell looped showed an x in the legend.
    import specfleet.report.plots as plots

    view = _long_named_view()
    axes = _kept_axes(monkeypatch)
    plots.run_scatter(view, "h/toy/cpu", tmp_path / "runs.png")
    (runs,) = axes
    assert "each bar the median" in runs.get_title()
    legend = runs.get_legend()
    assert legend.get_window_extent().x0 >= runs.get_window_extent().x1  # beside the axes
    assert [t.get_text() for t in legend.get_texts()] == ["plain", "calibrated",
                                                          "llama.cpp-lookup"]


def test_the_runs_plot_starts_its_tok_per_s_axis_at_zero(tmp_path, monkeypatch):
    # The axis began just below the slowest run: 97 against 100 tok/s filled its height.
    import specfleet.report.plots as plots

    view = _view(code=([100.0, 101.0, 99.0], [97.0, 98.0, 96.0]))
    axes = _kept_axes(monkeypatch)
    plots.run_scatter(view, "h/toy/cpu", tmp_path / "runs.png")
    (runs,) = axes
    low, high = runs.get_ylim()
    assert low == 0 and high > 101.0


def test_the_legend_shows_a_dot_for_an_arm_whose_first_cell_loops(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import specfleet.report.plots as plots

    def cell(rate, loop):
        return SimpleNamespace(loop=loop, rates=[rate], median_tok_per_s=rate)

    ran = {("m", "a", "plain"): cell(10.0, True), ("m", "b", "plain"): cell(10.0, False)}
    view = SimpleNamespace(models=["m"], prompts=["a", "b"], arms=["plain"],
                           cell=lambda target, m, p, a: ran.get((m, p, a)))
    axes = _kept_axes(monkeypatch)
    plots.run_scatter(view, "h/toy/cpu", tmp_path / "runs.png")
    (runs,) = axes
    (handle,) = runs.get_legend().legend_handles
    dot = runs.scatter([], [], marker="o").get_paths()[0]
    assert len(handle.get_paths()[0].vertices) == len(dot.vertices)  # a circle, not an x


def test_two_targets_whose_names_slug_alike_get_plot_files_of_their_own(tmp_path):
    # Hosts `a.b` and `a-b` both made speedup-a-b-torch-cpu.png: the second replaced the first.
    from types import SimpleNamespace

    from specfleet.report.plots import plot_files

    view = SimpleNamespace(targets=["a.b/torch/cpu", "a-b/torch/cpu", "c/torch/cpu"])
    files = plot_files(view, tmp_path)
    assert len(set(files)) == len(files) == 6
    assert [f.name for f in files[::2]] == ["speedup-a-b-torch-cpu.png",
                                            "speedup-a-b-torch-cpu-2.png",
                                            "speedup-c-torch-cpu.png"]


def test_a_heatmap_cell_of_a_loss_never_reads_1_00x():
    # As the tables: a 0.996x loss read "1.00x ▼" on the heatmap.
    from types import SimpleNamespace

    from specfleet.report.plots import cell_label

    def cell(ratio, verdict):
        return SimpleNamespace(speedup=ratio, verdict=verdict, no_verdict_n=None,
                               spread_flag=False, loop=False, throttled=False, parity=None)

    assert cell_label(cell(0.9964, "loss")) == "0.996x\n▼"
    assert cell_label(cell(0.9964, "within noise")) == "1.00x\n~"
