"""Facts for docs/benchmark_results/bandwidth.md: the worker's read probe 5 times, torch's
sum over 1 GiB for comparison, and the bundled model's weight bytes on torch and MLX.

Run from the repository root: `.venv/bin/python docs/benchmark_results/bandwidth/facts.py`.
"""
import statistics
import time

import torch

from specfleet.models.registry import resolve_model
from specfleet.workers.bandwidth import measure_read_gb_per_s
from specfleet.workers.loaded import load_model

probes = []
for _ in range(5):
    s = time.perf_counter(); probes.append(measure_read_gb_per_s()); probes[-1] = (probes[-1], round(time.perf_counter() - s, 2))
print("probe GB/s, seconds:", probes)
x = torch.ones(2**30 // 4)
rates = []
for _ in range(5):
    s = time.perf_counter(); x.sum(); rates.append(x.numel() * 4 / (time.perf_counter() - s) / 1e9)
print("torch sum 1 GiB GB/s:", [round(r, 1) for r in sorted(rates)], "median", round(statistics.median(rates), 1))
del x
for engine in ("torch", "mlx"):
    for alias in ("smollm2-135m", "smollm2-135m-q4"):
        try:
            m = load_model(resolve_model(alias, engine), engine, "cpu")
        except Exception as err:
            print(engine, alias, "not loaded:", str(err).splitlines()[0][:100]); continue
        print(engine, alias, "weight_bytes", m.weight_bytes)
