"""Plain decoding against the machine's limit: decode tok/s as a share of the bandwidth ceiling.

A plain step reads every weight once, so a host that reads `read_gb_per_s` cannot decode
faster than `read_gb_per_s * 1e9 / weight_bytes` tokens a second (docs/trust.md). The share
says how much of that a target reaches: a CPU target against the host's memory, a GPU
target against its device's own (both probed by the worker, `workers/bandwidth.py`). What
is missing (runs stored before weight bytes, hosts or devices before their probe) is "not
measured", never guessed.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from specfleet.engine.peers import PEER_KINDS
from specfleet.engine.stats import decode_tok_per_s

# Arms that decode plainly: ours, and peers that take no drafts (a library's own plain loop).
PLAIN_DECODERS: tuple[str, ...] = ("plain", *(p for p, k in PEER_KINDS.items() if not k.drafts))
NEAR_LIMIT_SHARE = 0.7  # at or above: the weight reads set the pace
LOW_SHARE = 0.4  # below: something other than reading weights sets the pace
# Why an engine decodes far below the ceiling on a CPU, in one line.
_LOW_WHY = {
    "torch": "eager torch on CPU: hundreds of small ops a step dispatched from Python and "
             "batch-1 matmuls that do not stream memory at full rate",
    "mlx": "MLX's CPU backend: the wheel's reference BLAS (unless OpenBLAS is preloaded) "
           "and slow quantized kernels, not weight reads, set the pace",
    # By arm: a peer whose library is not its engine's (the GGUF's own 4- or 8-bit blocks).
    "llama.cpp": "llama.cpp on the worker's threads: unpacking and multiplying quantized "
                 "blocks on few cores, not weight reads, sets the pace",
}


@dataclass(frozen=True)
class DecodeCeiling:
    """One (host, engine, device, model, arm): its plain decode rate against the ceiling.

    Attributes:
        arm: "plain" (ours) or a peer that decodes plainly (`PLAIN_DECODERS`).
        decode_tok_per_s: median over plain runs of (generated - 1) / decode seconds, runs
            without one (a one-token reply) left out; 0.0 when no run has one.
        weight_bytes: the weights' bytes as loaded (None: not recorded with the runs).
        read_gb_per_s: the host's measured read bandwidth (None: not measured).
        ceiling_tok_per_s, share: None when either fact is missing or the device's own
            memory was not probed.
        why: one line: what is missing, or why the share is what it is.
    """

    host: str
    engine: str
    device: str
    model: str
    arm: str
    runs: int
    decode_tok_per_s: float
    weight_bytes: int | None
    read_gb_per_s: float | None
    ceiling_tok_per_s: float | None
    share: float | None
    why: str


def decode_ceilings(runs: Iterable, bandwidth: Mapping[str, float | None]) -> list[DecodeCeiling]:
    """One `DecodeCeiling` per (host, engine, device, model, plain decoder) with runs, ours
    before the peers' (toy runs, which have no weights, are left out).

    Args:
        runs: stored runs (`RunRow`s: host, engine, device, model, arm, generated_tokens,
            decode_s, engine_config, noisy).
        bandwidth: host name -> its read GB/s as the store's host row has it (None or
            absent: not measured); a faster one a run stored (`read_gb_per_s` in its
            engine_config) wins.
    """
    groups: dict[tuple[str, str, str, str, int], list] = {}
    # (host, memory) -> GB/s: "cpu" is the host's memory, any other device its own.
    fastest = {(host, "cpu"): gb for host, gb in bandwidth.items() if gb}
    for run in runs:
        if run.arm in PLAIN_DECODERS and run.engine != "toy":
            key = (run.host, run.engine, run.device, run.model, PLAIN_DECODERS.index(run.arm))
            groups.setdefault(key, []).append(run)
        # What its worker read before its first quiet run; noise only slows a probe.
        if probed := (getattr(run, "engine_config", None) or {}).get("read_gb_per_s"):
            memory = (run.host, _memory(run.engine, run.device))
            fastest[memory] = max(float(probed), fastest.get(memory, 0.0))
    return [_ceiling(key, group, fastest.get((key[0], _memory(key[1], key[2]))))
            for key, group in sorted(groups.items())]


def _memory(engine: str, device: str) -> str:
    """The memory a target reads weights from: the host's, or its device's own (MLX and
    torch on one Apple GPU are probed apart, each with its own kernels)."""
    return "cpu" if device == "cpu" else f"{engine}/{device}"


def _ceiling(key: tuple[str, str, str, str, int], runs: list,
             gb_per_s: float | None) -> DecodeCeiling:
    host, engine, device, model, decoder = key
    arm = PLAIN_DECODERS[decoder]
    rates = [decode_tok_per_s(r.generated_tokens or 0, r.decode_s or 0.0) for r in runs]
    # 0.0 is "not measured" (a one-token reply): a median over it reads a slower decoder.
    measured = [rate for rate in rates if rate > 0]
    rate = statistics.median(measured) if measured else 0.0
    sizes = [int(size) for r in runs
             if (size := (r.engine_config or {}).get("weight_bytes")) is not None]
    weight_bytes = max(sizes) if sizes else None  # one model on one device: one size
    ceiling = share = None
    if not measured:
        why = "not measured: no plain run decoded past its first token"
    elif weight_bytes is None:
        why = "not measured: weight bytes were not stored with these runs"
    elif gb_per_s is None and device == "cpu":
        why = "not measured: the host's read bandwidth was not recorded"
    elif gb_per_s is None:
        why = (f"not measured: no read bandwidth of the {device} device's own memory was "
               "stored with these runs (runs before its probe, or a probe that could not run)")
    else:
        ceiling = gb_per_s * 1e9 / weight_bytes
        share = rate / ceiling
        # The CPU reasons by arm or engine; a GPU's own are not those (generic line).
        why = share_why(share, (arm if arm in _LOW_WHY else engine) if device == "cpu"
                        else device)
        busy = sum(bool(getattr(r, "noisy", False)) for r in runs)
        if busy:  # a busy host slows the probe and the runs, each by its own amount
            why = f"{busy} of {len(runs)} runs noisy (host busy): share unreliable; {why}"
    if measured and len(measured) < len(runs):
        why = (f"{len(runs) - len(measured)} of {len(runs)} runs have no decode rate (a "
               f"one-token reply), left out; {why}")
    return DecodeCeiling(host, engine, device, model, arm, len(runs), rate, weight_bytes,
                         gb_per_s, ceiling, share, why)


def share_why(share: float, engine: str) -> str:
    """One line on why plain decoding reaches `share` of the ceiling (`engine`: the engine,
    or a peer arm with a reason of its own)."""
    if share > 1.0:  # no decoder reads weights faster than memory delivers them
        return ("above the ceiling: the bandwidth probe read slower than the runs did (a busy "
                "host when the worker started?); restart the worker on a quiet host")
    if share >= NEAR_LIMIT_SHARE:
        return "near the limit: reading the weights sets the pace"
    if share >= LOW_SHARE:
        return "per-step overhead beside the weight reads"
    return _LOW_WHY.get(engine, "per-step overhead (Python, op dispatch, small kernels), "
                                "not weight reads, sets the pace")
