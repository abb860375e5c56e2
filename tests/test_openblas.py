"""OpenBLAS for MLX's CPU backend: chosen by the CPU's flags, loaded on the first `import mlx`
of a specfleet process, after torch (which keeps its own BLAS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specfleet import openblas

SKYLAKE = "flags\t\t: fpu sse avx avx2 fma avx512f avx512bw avx512vl\n"
HASWELL = "flags\t\t: fpu sse avx avx2 fma\n"
# What a fresh process has mapped and imported once it has imported specfleet, then mlx.
PROBE = """
import json, sys
import specfleet
before = sorted(m for m in ("torch", "mlx") if m in sys.modules)
import mlx.core
maps = open("/proc/self/maps").read()
print(json.dumps({"before": before, "torch": "torch" in sys.modules,
                  "openblas": "libopenblas" in maps, "why_not": specfleet.openblas.why_not()}))
"""


def test_the_core_type_is_the_best_every_cpu_supports():
    assert openblas.core_type(SKYLAKE) == "SKYLAKEX"
    assert openblas.core_type(HASWELL) == "HASWELL"
    assert openblas.core_type(SKYLAKE + HASWELL) == "HASWELL"  # one core without AVX-512
    assert openblas.core_type("flags\t: fpu sse\n") is None
    assert openblas.core_type("model name: ?\n") is None


def _probe(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.skipif(openblas.why_not() not in (None, "mlx was imported first"),
                    reason=f"OpenBLAS does not apply here: {openblas.why_not()}")
def test_the_first_import_of_mlx_loads_openblas_after_torch_and_can_be_turned_off():
    pytest.importorskip("mlx.core", reason="mlx is not installed")
    on = _probe()
    # Nothing heavy at `import specfleet`; torch comes in first so it keeps MKL's sgemm_.
    assert on["before"] == [] and on["openblas"] and on["torch"], on
    assert on["why_not"] == "mlx was imported first"
    off = _probe(SPECFLEET_OPENBLAS="0")
    assert not off["openblas"] and not off["torch"], off
