"""What a reader sees in the record's PNGs: text that can be read on the colour under it."""

from __future__ import annotations

from types import SimpleNamespace

from tests.report.test_plots import _kept_axes, fill_under


def _contrast(fg, bg) -> float:
    """WCAG contrast ratio of two RGB(A) colours with channels in 0..1."""
    def lum(c):
        r, g, b = ((v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4) for v in c[:3])
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((lum(fg), lum(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_every_heatmap_cell_text_reads_on_its_colour(tmp_path, monkeypatch):
    # Black text sat on the scale's dark ends: the largest gain of every heatmap (its darkest
    # green) read at 3:1, under the 4.5:1 small text needs. A cell within noise is grey.
    from matplotlib.colors import to_rgba

    import specfleet.report.plots as plots
    from specfleet.stats.view import view_of_runs

    rates = {"code": ([100.0, 101.0, 99.0], [300.0, 302.0, 298.0]),
             "prose": ([100.0, 101.0, 99.0], [40.0, 41.0, 39.0]),
             "story": ([100.0, 101.0, 99.0], [100.0, 102.0, 98.0])}
    runs = [SimpleNamespace(host="h", engine="toy", device="cpu", model="m", prompt_name=prompt,
                            arm=arm, repeat=i, status="done", tok_per_s=rate, token_ids=[1, 2])
            for prompt, sides in rates.items()
            for arm, side in zip(("plain", "graded"), sides, strict=True)
            for i, rate in enumerate(side)]
    view = view_of_runs("x", "x", runs)
    axes = _kept_axes(monkeypatch)
    plots.speedup_heatmap(view, "h/toy/cpu", tmp_path / "speedup.png")
    (heat,) = axes
    assert len(heat.texts) == 3
    for text in heat.texts:
        ratio = _contrast(to_rgba(text.get_color()), to_rgba(fill_under(heat, text)))
        assert ratio >= 4.5, (text.get_text(), text.get_color(), round(ratio, 1))
