"""Ours vs transformers' generate on one TorchRunner, interleaved: plain decode tok/s of
(a) bare runner steps (forward + argmax + read), (b) our engine loop (plain), (c) hf generate.

Run from the repository root: `.venv/bin/python docs/benchmark_results/bandwidth/peer_steps.py`.
"""
import statistics
import time

import torch

from specfleet.engine.loop import generate
from specfleet.engine.peers import PeerCall, generate_peer
from specfleet.models.registry import resolve_model
from specfleet.workers.loaded import load_model

N = 48
m = load_model(resolve_model("smollm2-135m", "torch"), "torch", "cpu")
r = m.runner
ids = r.encode_prompt("Write a short story about a lighthouse keeper.", True)

def bare():
    r.reset(); t = r.read_tokens(r.argmax(r.prefill(ids)))[0]
    s = time.perf_counter()
    for _ in range(N - 1):
        t = r.read_tokens(r.argmax(r.forward([t])))[-1]
    d = time.perf_counter() - s; r.reset(); return (N - 1) / d

def ours():
    g = generate(r, ids, max_tokens=N, lookup=None)
    r.reset(); return (len(g.tokens) - 1) / g.timings.decode_s

def hf():
    g = generate_peer(r, ids, PeerCall("hf", N))
    return (len(g.tokens) - 1) / g.timings.decode_s

for f in (bare, ours, hf): f()  # warm
res = {f.__name__: [] for f in (bare, ours, hf)}
for _ in range(4):
    for f in (bare, ours, hf):
        res[f.__name__].append(f())
for k, v in res.items():
    print(k, "decode tok/s median %.2f  (%s)" % (statistics.median(v), ", ".join(f"{x:.2f}" for x in v)))
print("threads", torch.get_num_threads(), "weight_bytes", m.weight_bytes)
