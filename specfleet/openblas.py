"""OpenBLAS for MLX's CPU backend on Linux x86-64, loaded in the process that imports MLX.

The `mlx[cpu]` wheel bundles netlib's reference BLAS (a 1024^3 matmul ~1 s). Its BLAS calls
resolve through the dynamic linker's global scope first, so Debian's OpenBLAS
(`libopenblas0-pthread`) loaded with RTLD_GLOBAL before `mlx` is imported takes them over:
Gemma 3 270M prefilled 538 tokens in 3.1 s instead of 78 s here, a 576x1536 matmul ran 28x
faster. torch must be imported first: libtorch_cpu exports its own (MKL) `sgemm_` and binds
it through the same global scope, so torch imported after OpenBLAS made its steps 2-4x slower
here, while torch imported before keeps MKL (measured: 0.48 s vs 0.50 s vs 1.16 s a loop).

`specfleet/__init__.py` installs `import_hook()`: the first `import mlx.core` of any specfleet
process (a worker, `generate --engine mlx`, the test suite) loads OpenBLAS this way, once.
It does nothing on macOS, on aarch64 (GB10), without the library, or with
`SPECFLEET_OPENBLAS=0`. OpenBLAS 0.3.21 misdetects this kind of CPU as Prescott unless
`OPENBLAS_CORETYPE` names a core the CPU supports, chosen here from /proc/cpuinfo's flags
(never a core the CPU lacks).

    python -c "import specfleet.openblas as o; o.install(); print(o.why_not() or 'applies')"
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

from specfleet.settings import OPENBLAS

LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
PACKAGE = "libopenblas0-pthread"
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


def why_not() -> str | None:
    """Why OpenBLAS is not loaded for MLX in this process, or None when it applies."""
    if not OPENBLAS.read():
        return f"{OPENBLAS.name}=0"
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return "not Linux x86-64"
    if not LIBRARY.exists():
        return f"{LIBRARY} is missing (apt-get install {PACKAGE})"
    if "mlx.core" in sys.modules:
        return "mlx was imported first"
    return None


def load_for_mlx() -> None:
    """Load OpenBLAS into the global scope before MLX is imported (torch first, when
    installed); nothing where `why_not` says it does not apply or the CPU's core is unknown."""
    if why_not() is not None:
        return
    if "OPENBLAS_CORETYPE" not in os.environ:
        core = core_type(Path("/proc/cpuinfo").read_text())
        if core is None:
            return
        os.environ["OPENBLAS_CORETYPE"] = core  # read by OpenBLAS when it loads
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401  (binds its BLAS calls to its own MKL first)
    global _loaded
    ctypes.CDLL(str(LIBRARY), mode=ctypes.RTLD_GLOBAL)  # a second load is a no-op
    _loaded = True


_loaded = False  # whether `load_for_mlx` loaded the library into this process


def set_threads(threads: int) -> None:
    """OpenBLAS's threads: set now where this process loaded it, else when it loads."""
    if _loaded:
        ctypes.CDLL(str(LIBRARY)).openblas_set_num_threads(threads)
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)  # read by OpenBLAS when it loads


class _BeforeMlx:
    """A one-shot meta-path finder: on the first import of `mlx.core` (the extension that links
    MLX's BLAS), load OpenBLAS, then step aside. Probing for `mlx` (`find_spec`, cheap host
    detection) does not trigger it."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 (the finder protocol)
        if name == "mlx.core":
            _remove_hook()
            # A broken torch or library never stops MLX itself from importing.
            with contextlib.suppress(ImportError, OSError):
                load_for_mlx()
        return None  # the regular finders import mlx itself


_HOOK = _BeforeMlx()


def import_hook() -> None:
    """Install the one-shot hook (no-op where OpenBLAS cannot apply or MLX is loaded)."""
    if why_not() is None and _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def _remove_hook() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def install() -> None:
    """apt-get install the OpenBLAS package when missing (root on Debian/Ubuntu only; quiet)."""
    if LIBRARY.exists() or platform.system() != "Linux" or os.geteuid() != 0:
        return
    if not Path("/usr/bin/apt-get").exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", PACKAGE], env=env, capture_output=True,
                   timeout=600, check=False)
