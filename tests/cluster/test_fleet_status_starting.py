"""Fleet commands while this machine's `fleet up` is still inside `ray start`: no node record
yet, so `fleet status` fell through to starting the embedded fleet (about 30 s on a loaded
box, then a failure), and `matrix run` ran the matrix on an embedded fleet beside the node
being started. The command starting a node marks itself (`noderecord.starting`); every
command that would fall through to the embedded fleet says so in one line at once (exit 1),
`--embedded` still gets it; a second `up` meanwhile is refused. The mark here is held by
another process, as `up` holds it, through the real files; no Ray starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.cluster import noderecord
from specfleet.errors import UserError

BIN = Path(sys.executable).parent
STARTING_ADVICE = ("; run this again once it is up (`specfleet fleet status` says when), or "
                   "pass --embedded for a private fleet\n")
TOY_MATRIX = """\
name: toy
models: ["script:1ms"]
prompts: [{name: p, text: "one two"}]
arms: [plain]
targets: {engines: [toy]}
"""
HOLD = "from specfleet.cluster import noderecord; import time\n" \
       "with noderecord.starting('fleet up', 'h9'):\n    print('held', flush=True); time.sleep(60)"


def env_for(tmp_path: Path) -> dict[str, str]:
    drop = ("RAY_ADDRESS", "SPECFLEET_ADDRESS", "RAY_AUTH_TOKEN")
    return {k: v for k, v in os.environ.items() if k not in drop} | {
        "SPECFLEET_HOME": str(tmp_path / "home"),
        "SPECFLEET_RUNTIME_DIR": str(tmp_path / "run"),
        "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token"),
    }


def test_status_during_up_says_a_node_is_starting_instead_of_starting_the_embedded_fleet(
        tmp_path, monkeypatch) -> None:
    env = env_for(tmp_path)
    (tmp_path / "auth_token").write_text("0" * 64)
    (tmp_path / "auth_token").chmod(0o600)
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        status = subprocess.run([str(BIN / "specfleet"), "fleet", "status"], env=env,
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 1, status.stderr[-2000:]
        assert status.stdout == ""
        assert status.stderr.startswith(
            f"error: `specfleet fleet up` (host h9, pid {holder.pid}) is starting this "
            "machine's node since "), status.stderr
        assert status.stderr.endswith(STARTING_ADVICE)
        assert status.stderr.count("\n") == 1
        # A matrix went to an embedded fleet started beside the node being started.
        matrix = tmp_path / "toy.yaml"
        matrix.write_text(TOY_MATRIX)
        run = subprocess.run([str(BIN / "specfleet"), "matrix", "run", str(matrix), "--db",
                              f"sqlite:///{tmp_path / 'm.db'}", "--no-progress"], env=env,
                             capture_output=True, text=True, timeout=120)
        assert (run.returncode, run.stdout) == (1, ""), run.stderr[-2000:]
        assert run.stderr.startswith(f"error: `specfleet fleet up` (host h9, pid {holder.pid})")
        assert run.stderr.endswith(STARTING_ADVICE) and run.stderr.count("\n") == 1
        # A second `up` meanwhile would race the first for the port and the record.
        monkeypatch.setenv("SPECFLEET_HOME", env["SPECFLEET_HOME"])
        with pytest.raises(UserError) as err, noderecord.starting("fleet up", "h8"):
            pytest.fail("a second mark was taken")
        assert str(err.value).startswith(f"`specfleet fleet up` (host h9, pid {holder.pid})")
        assert str(err.value).endswith("expected it to finish (or Ctrl-C it) before "
                                       "`specfleet fleet up`")
        # `--embedded`, or another fleet named, is what the user asked for: no mark read.
        assert subprocess.run(
            [str(BIN / "specfleet"), "fleet", "status", "--address", "127.0.0.1:1"], env=env,
            capture_output=True, text=True, timeout=120).stderr.startswith(
                "error: 127.0.0.1:1 (from --address): no Ray head answers there")
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert noderecord.starting_node() is None  # killed before it could remove its mark


def test_the_mark_is_gone_once_its_command_is_done_and_a_stale_one_is_replaced(
        home) -> None:
    with noderecord.starting("fleet join", "h2"):
        mark = noderecord.starting_node()
        assert mark is not None and (mark.command, mark.host, mark.pid) == (
            "fleet join", "h2", os.getpid())
        assert mark.since <= time.time()
    assert not noderecord.starting_path().exists()
    # Left by a command killed with SIGKILL: its pid runs no more.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    noderecord.starting_path().write_text(
        f'{{"command": "fleet up", "host": "h1", "pid": {gone.stdout.strip()}, '
        '"created": 1.0, "since": 1.0}\n')
    assert noderecord.starting_node() is None
    with noderecord.starting("fleet up", "h3"):
        assert noderecord.starting_node().host == "h3"


def test_embedded_asks_for_the_embedded_fleet_all_the_same(home, monkeypatch) -> None:
    """The mark is read only when the fleet fell through to the embedded one: `--embedded`
    connects (Ray's start stood in for here), an `--address` is tried as given."""
    from specfleet.cluster import fleet, reach

    connected: list[str | None] = []
    monkeypatch.setattr(fleet, "connect", connected.append)
    monkeypatch.delenv("SPECFLEET_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with noderecord.starting("fleet join", "h4"):
        with pytest.raises(reach.FleetStarting) as err:
            reach.connect_fleet(None)
        assert err.value.exit_code == 1 and "`specfleet fleet join` (host h4" in str(err.value)
        assert reach.connect_fleet(None, embedded=True).embedded
    assert connected == [None]
    assert reach.connect_fleet(None).embedded and connected == [None, None]  # mark gone
