"""Helpers of the namespace-fleet tests (tools/netfleet.py, tools/chaos.py): the tools loaded
as modules, and drivers started inside a host's namespace. Only drivers get the store's URL
(with its password) in their environment."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

_TOOLS = Path(__file__).parents[2] / "tools"


def load_tool(name: str):
    """tools/NAME.py as module NAME (once)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


netfleet = load_tool("netfleet")
pg_ctl, sql = netfleet.pg_ctl, netfleet.sql
DRIVER_LEASE_S = 10  # outlives the tests' store outages: a live driver's runs stay its own
# A driver the test kills: `resume` may take its runs this long after the kill (at most).
KILLED_DRIVER_LEASE_S = 3


def drive(nf, host: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """A driver command run to its end."""
    return nf.specfleet(host, *args, env=nf.env(nf.host(host), SPECFLEET_DB=nf.db_url), **kwargs)


def drive_async(nf, host: str, *args: str, lease_s: float = DRIVER_LEASE_S) -> subprocess.Popen:
    """A driver started in the background, with a short run-ownership lease."""
    return nf.popen(host, [str(netfleet.BIN / "specfleet"), *args],
                    env=nf.env(nf.host(host), SPECFLEET_DB=nf.db_url,
                               SPECFLEET_LEASE_S=f"{lease_s:g}"),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write(fleet, host: str, name: str, text: str) -> str:
    """A file in the host's HOME; its path."""
    path = Path(fleet.host(host).home, name)
    path.write_text(text)
    return str(path)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done
