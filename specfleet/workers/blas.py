"""OpenBLAS for MLX's CPU backend on Linux: the environment that makes it ~25x faster to prefill.

The `mlx[cpu]` wheel bundles netlib's reference BLAS (a 1024^3 matmul ~1 s). Preloading
Debian's OpenBLAS (`libopenblas0-pthread`) replaces it: Gemma 3 270M prefilled 538 tokens in
3.1 s instead of 78 s here. OpenBLAS 0.3.21 misdetects this kind of CPU as Prescott unless
`OPENBLAS_CORETYPE` names a core the CPU supports, chosen here from /proc/cpuinfo's flags
(never a core the CPU lacks).

Only for processes that run MLX without torch: libtorch_cpu exports its own (MKL) `sgemm_`
and calls it through the dynamic linker, so a preloaded OpenBLAS takes over torch's BLAS
calls too and made a torch decode step 2-4x slower here (67 ms -> 151-255 ms on SmolLM2).
A preload only works from process start, so it is applied where such processes start: the
Ray node of `fleet up` / `fleet join` on a host offering MLX alone (`--engines mlx`, or no
torch installed), and by hand for one command (`env $(python -m specfleet.workers.blas)
specfleet generate --engine mlx ...`). `SPECFLEET_OPENBLAS=0` turns it off.

    python -m specfleet.workers.blas            # LD_PRELOAD=... OPENBLAS_CORETYPE=..., or nothing
    python -m specfleet.workers.blas --install  # first apt-get install libopenblas0-pthread (root)
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
PACKAGE = "libopenblas0-pthread"
SWITCH_ENV = "SPECFLEET_OPENBLAS"  # "0": keep the wheel's own BLAS
# Best core first: the first whose flags the CPU has all of.
CORE_TYPES = (("SKYLAKEX", ("avx512f", "avx512bw", "avx512vl")), ("HASWELL", ("avx2", "fma")),
              ("SANDYBRIDGE", ("avx",)))


def core_type(cpuinfo: str) -> str | None:
    """The best OpenBLAS core type whose instructions every CPU flag line lists."""
    flag_lines = [line for line in cpuinfo.splitlines() if line.startswith("flags")]
    if not flag_lines:
        return None
    common = set.intersection(*(set(line.split(":", 1)[1].split()) for line in flag_lines))
    for name, needed in CORE_TYPES:
        if all(flag in common for flag in needed):
            return name
    return None


def openblas_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that preload OpenBLAS here, or {} (not Linux x86-64, no library, no
    known core type, turned off, or already preloaded)."""
    env = os.environ if environ is None else environ
    if env.get(SWITCH_ENV) == "0" or platform.system() != "Linux":
        return {}
    if platform.machine() != "x86_64" or not LIBRARY.exists():
        return {}
    if str(LIBRARY) in env.get("LD_PRELOAD", ""):
        return {}
    try:
        core = env.get("OPENBLAS_CORETYPE") or core_type(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {}
    if core is None:
        return {}
    preload = ":".join(p for p in (str(LIBRARY), env.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, "OPENBLAS_CORETYPE": core}


def install() -> None:
    """apt-get install the OpenBLAS package when missing (root on Debian/Ubuntu only; quiet)."""
    if LIBRARY.exists() or platform.system() != "Linux" or os.geteuid() != 0:
        return
    if not Path("/usr/bin/apt-get").exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", PACKAGE], env=env, capture_output=True,
                   timeout=600, check=False)


def main(argv: list[str]) -> None:
    """Print `NAME=value` assignments for `env` (nothing when OpenBLAS does not apply)."""
    if "--install" in argv:
        install()
    print(" ".join(f"{k}={v}" for k, v in openblas_env().items()))


if __name__ == "__main__":
    main(sys.argv[1:])
