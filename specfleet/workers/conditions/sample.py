"""Take one `HostConditions` reading of this machine, from the sources its platform has.

`SPECFLEET_CONDITIONS_ROOT` (or a worker's `conditions_root=`) points the Linux file
sources at another directory tree laid out like `/` (`sys/...`, `proc/meminfo`): a test
writes such a tree and flips a thermal zone in it to simulate a throttled host. Tools
(`pmset`, `vm_stat`, `nvidia-smi`) run with a short timeout; a failed tool leaves its fields
None with the reason in `missing`.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import time

from specfleet.settings import CONDITIONS_ROOT
from specfleet.workers.conditions.linux import read_linux
from specfleet.workers.conditions.macos import read_macos
from specfleet.workers.conditions.model import HostConditions
from specfleet.workers.conditions.nvidia import read_nvidia

TOOL_TIMEOUT_S = 3.0


def run_tool(cmd: list[str]) -> str | None:
    """stdout of a small system tool; None when it is missing, fails or times out."""
    if not shutil.which(cmd[0]):
        return None
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def conditions_root(root: str | None = None) -> str:
    """The directory the Linux sources read: `root`, else $SPECFLEET_CONDITIONS_ROOT, else /."""
    return root or CONDITIONS_ROOT.read() or "/"


def sample_conditions(root: str | None = None) -> HostConditions:
    """One reading of this machine's power, thermal state, clocks and memory.

    Args:
        root: where the Linux sources read (see `conditions_root`); macOS ignores it.

    Returns:
        The reading; `sample_ms` says how long it took.
    """
    start = time.perf_counter()
    system = platform.system().lower()
    reading = HostConditions(at=time.time(), platform=system)
    if system == "darwin":
        reading = read_macos(reading, run_tool)
    else:
        reading = read_linux(reading, conditions_root(root))
        reading = read_nvidia(reading, run_tool)
    return reading.merged(sample_ms=round((time.perf_counter() - start) * 1000, 3))
