"""`specfleet serve`: a read-only web view of the store and the fleet.

Pages (each with a JSON twin under `/api/`): the fleet, the matrices with live progress, one
matrix (speed-up heatmaps, the terminal's tables, parity, load, spec, downloads), its runs
and outputs, one cell's history, and two matrices compared. Plots are server-side SVG; the
one script and the one stylesheet are served by the app, so it works offline.
"""

from specfleet.serve.app import create_app

__all__ = ["create_app"]
