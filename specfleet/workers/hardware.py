"""What a host is: OS, chip, memory, engines and devices, versions -> `HostInfo`.

Detection is cheap by default: engines are found with `importlib.util.find_spec` and small
probes (torch's `version.py` read as text, `nvidia-smi`, `sysctl`), never by importing torch or
MLX. `detect_host(full=True)` imports them to ask the devices directly.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

import specfleet
from specfleet.engine.config import resolve_policy
from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.errors import UserError
from specfleet.jobs.run import Target
from specfleet.settings import HOST, HOST_NAME_EXPECTED, host_name_problem

VERSIONED_PACKAGES: tuple[str, ...] = ("ray", "mlx", "mlx-lm", "torch", "transformers")
_PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HostInfo:
    """One host as the fleet sees it.

    Attributes:
        name: the fleet name of the host (label `specfleet.host`).
        machine_id: stable id of the machine (/etc/machine-id, IOPlatformUUID, or MAC-based).
        os: "linux", "darwin", ...; os_release: kernel / macOS version string.
        chip: CPU brand or Apple chip; gpu: NVIDIA GPU name or None.
        engines: engine -> devices present, e.g. {"torch": ("cuda", "cpu")}.
        versions: python, specfleet (+ git commit), ray, mlx, mlx-lm, torch, transformers.
        kind: mac-mlx | gb10-cuda | linux-cuda | linux-cpu | mac-cpu | <os>-cpu.
        selftest: "engine/device" -> its start-up self-test (`workers/selftest.SelfTest` as
            a dict); a target whose test failed is left out of `targets()`.
        read_gb_per_s: memory read bandwidth the worker measured before its first run of a
            real model (`workers/bandwidth.py`); None until then.
    """

    name: str
    machine_id: str
    os: str
    os_release: str
    arch: str
    chip: str
    gpu: str | None
    cpu_count: int
    memory_gb: float
    engines: dict[str, tuple[str, ...]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    kind: str = "linux-cpu"
    selftest: dict[str, dict] = field(default_factory=dict)
    read_gb_per_s: float | None = None

    def targets(self) -> list[Target]:
        """Every (host, engine, device) this host can run, best device first; a target that
        failed its self-test is left out (the scheduler never sends it a run)."""
        every = [
            Target(host=self.name, engine=engine, device=device)
            for engine in MODEL_ENGINES  # in the order targets are listed
            for device in self.engines.get(engine, ())
        ]
        failed = self.failed_targets()
        return [t for t in every if f"{t.engine}/{t.device}" not in failed]

    def failed_targets(self) -> dict[str, str]:
        """"engine/device" -> why its self-test failed (one line)."""
        return {label: test.get("reason", "") for label, test in self.selftest.items()
                if not test.get("passed", True)}

    def default_policies(self) -> dict[str, str]:
        """Target label -> the backend's default drafting policy (`auto` resolved)."""
        return {t.label: resolve_policy("auto", t.device) for t in self.targets()}

    @property
    def fingerprint(self) -> str:
        """A short hash of what makes this host's numbers comparable: hardware and library
        versions, but neither the fleet name nor specfleet's own version (that is what a
        regression check compares). Measurements (self-test, bandwidth) are left out."""
        parts = {k: v for k, v in asdict(self).items()
                 if k not in ("name", "selftest", "read_gb_per_s")}
        parts["versions"] = {
            k: v for k, v in self.versions.items() if not k.startswith("specfleet")
        }
        blob = json.dumps(parts, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        """Plain dict (lists for tuples) plus targets, default policies and fingerprint."""
        out = asdict(self)
        out["engines"] = {k: list(v) for k, v in self.engines.items()}
        out["targets"] = [t.label for t in self.targets()]
        out["failed_targets"] = self.failed_targets()
        out["default_policies"] = self.default_policies()
        out["fingerprint"] = self.fingerprint
        return out


def detect_host(name: str | None = None, *, full: bool = False) -> HostInfo:
    """Detect this machine.

    Args:
        name: fleet name; default `SPECFLEET_HOST` or the short host name.
        full: import torch / MLX to ask for devices (slower, exact).

    Returns:
        A `HostInfo`.
    """
    os_name = platform.system().lower()
    arch = platform.machine().lower()
    gpu = _gpu_name(full)
    engines = {
        "mlx": _mlx_devices(os_name, arch, full),
        "torch": _torch_devices(os_name, arch, gpu, full),
    }
    engines = {k: v for k, v in engines.items() if v}
    return HostInfo(
        name=name or default_host_name(),
        machine_id=machine_id(),
        os=os_name,
        os_release=platform.release(),
        arch=arch,
        chip=_chip(os_name),
        gpu=gpu,
        # The machine's CPUs (what it is, in its fingerprint); what Ray may use: logical_cpus.
        cpu_count=os.cpu_count() or 1,
        memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
        engines=engines,
        versions=library_versions(),
        kind=host_kind(os_name, arch, gpu),
    )


def default_host_name() -> str:
    """`SPECFLEET_HOST`, else the short host name (lower case).

    Raises:
        UserError: `SPECFLEET_HOST` is not a fleet name (a Ray label value and a store key),
            or it is unset and the machine's host name is none (`x-`, `bad!host`).
    """
    given = HOST.read()
    if given:
        return given
    name = socket.gethostname().split(".")[0].lower()
    if host_name_problem(name):
        raise UserError(f"this machine's host name {name!r} cannot name a fleet host (a Ray "
                        f"label value and a store key); expected {HOST.name} set to "
                        f"{HOST_NAME_EXPECTED}")
    return name


def host_kind(os_name: str, arch: str, gpu: str | None) -> str:
    """mac-mlx (Apple Silicon), gb10-cuda (GB10 / DGX Spark), linux-cuda, linux-cpu, ..."""
    if os_name == "darwin":
        return "mac-mlx" if arch in ("arm64", "aarch64") else "mac-cpu"
    if gpu:
        is_gb10 = "gb10" in gpu.lower() or (arch == "aarch64" and "nvidia" in gpu.lower())
        return "gb10-cuda" if is_gb10 else f"{os_name}-cuda"
    return f"{os_name}-cpu"


def machine_id() -> str:
    """/etc/machine-id on Linux, IOPlatformUUID on macOS, else a MAC-derived id."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        text = _read_text(path).strip()
        if text:
            return text
    out = probe_output(["ioreg", "-rd1", "-c", "IOPlatformExpertDevice"])
    match = re.search(r'"IOPlatformUUID"\s*=\s*"([^"]+)"', out)
    return match.group(1) if match else f"mac-{uuid.getnode():012x}"


def library_versions() -> dict[str, str]:
    """Versions of python, specfleet (with git commit when run from a checkout) and engines."""
    versions = {"python": platform.python_version(), "specfleet": specfleet.__version__}
    commit = git_commit()
    if commit:
        versions["specfleet_commit"] = commit
    for dist in VERSIONED_PACKAGES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_commit() -> str | None:
    """The checkout's commit when specfleet runs from a git checkout, else None."""
    root = Path(specfleet.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    return probe_output(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"]).strip() or None


def _chip(os_name: str) -> str:
    if os_name == "darwin":
        brand = probe_output(["sysctl", "-n", "machdep.cpu.brand_string"]).strip()
        if brand:
            return brand
    for line in _read_text("/proc/cpuinfo").splitlines():
        if line.startswith(("model name", "Model", "Hardware")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _gpu_name(full: bool) -> str | None:
    if full and _has("torch"):
        import torch  # only on request: it takes seconds

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    if shutil.which("nvidia-smi"):
        names = probe_output(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).strip()
        return names.splitlines()[0].strip() if names else None
    return None


def _mlx_devices(os_name: str, arch: str, full: bool) -> tuple[str, ...]:
    if not _has("mlx"):
        return ()
    if full:
        import mlx.core as mx

        gpu = "metal" if os_name == "darwin" else "cuda"
        return (gpu, "cpu") if mx.is_available(mx.gpu) else ("cpu",)
    if os_name == "darwin" and arch == "arm64":
        return ("metal", "cpu")
    cuda_backend = any(_dist_present(d) for d in ("mlx-cuda", "mlx-cuda-12", "mlx-cuda-13"))
    return ("cuda", "cpu") if cuda_backend else ("cpu",)


def _torch_devices(os_name: str, arch: str, gpu: str | None, full: bool) -> tuple[str, ...]:
    if not _has("torch"):
        return ()
    if full:
        import torch

        devices = ["cuda"] if torch.cuda.is_available() else []
        devices += ["mps"] if torch.backends.mps.is_available() else []
        return (*devices, "cpu")
    if os_name == "darwin":
        return ("mps", "cpu") if arch == "arm64" else ("cpu",)
    return ("cuda", "cpu") if gpu and _torch_cuda_build() else ("cpu",)


def _torch_cuda_build() -> bool:
    """True when the installed torch was built with CUDA (read from torch/version.py)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    text = _read_text(str(Path(spec.origin).parent / "version.py"))
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+)$", text, re.MULTILINE)
    return match is not None and match.group(1).strip() not in ("None", "''", '""')


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _dist_present(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def probe_output(cmd: list[str]) -> str:
    """stdout of a small system command, '' when it is missing or fails."""
    if not shutil.which(cmd[0]):
        return ""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""
