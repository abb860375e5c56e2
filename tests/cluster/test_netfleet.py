"""A real fleet: hosts in their own network namespaces with their own addresses, joined with
the CLI (tools/netfleet.py), the store in PostgreSQL served from the head's namespace, the
head's worker proving both engines with its start-up self-test as a user's does (h2 and h3
skip it: the same code, ~8 CPU-s an engine, proven on h1 and in tests/workers/test_selftest.py).

Hosts: h1 (head; mlx + torch), h2 (torch only), h3 (mlx only); `cli` is a client with only the
token and the address; `out` is a machine on the network that is not in the fleet. Ray's health
checks are left at their shipped defaults, as `fleet up` gives users. Faults on such a fleet:
tests/cluster/test_netfleet_faults.py.
Skips (with the reason) where namespaces cannot be made: not root, no `ip`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from specfleet.settings import RUNTIME_DIR, SELFTEST
from tests.cluster.nsfleet import drive, netfleet, ok, sql, write
from tests.conftest import _make_root

WHY_NOT = netfleet.can_build()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

HOSTS = {"h1": ["mlx", "torch"], "h2": ["torch"], "h3": ["mlx"]}
SECRET = f"pw-{uuid.uuid4().hex}"  # in the driver's DB URL; must never reach a worker
REAL_MATRIX = """\
name: nf-real
models: [smollm2-135m]
prompts: [{name: count, text: "one two three four five six"}]
arms: [plain, graded]
repeats: 1
max_tokens: 12
temperature: 0.0
chat: false
targets: {engines: [torch, mlx]}
"""


@pytest.fixture(scope="module")
def nf():
    from specfleet.models.bundled import fetch_bundled

    fetch_bundled()  # the hosts share this machine's fetched model (a fresh machine has none)
    fleet = netfleet.create(HOSTS, outside=("cli", "out"), fast_health=False)
    # Machine locks apart from other sessions'.
    fleet.extra_env = {RUNTIME_DIR.name: str(Path(fleet.root, "rt"))}
    fleet.host_env = {name: {SELFTEST.name: "0"} for name in ("h2", "h3")}
    root = _make_root()
    try:
        fleet.db_url = netfleet.start_postgres(fleet, root, SECRET)
        netfleet.start(fleet)
        netfleet.copy_token(Path(fleet.head.home, ".ray", "auth_token"), fleet.host("cli"))
        yield fleet
    finally:
        problems = netfleet.destroy(fleet)  # kills postgres too: it runs in h1's namespace
        shutil.rmtree(root, ignore_errors=True)
        assert not problems, problems


# ---- the cross-backend matrix, submitted on the head without --address ------------------------


def test_a_matrix_on_the_head_runs_on_every_host_and_parity_runs_from_a_client(nf) -> None:
    matrix = write(nf, "h1", "real.yaml", REAL_MATRIX)
    done = ok(drive(nf, "h1", "matrix", "run", matrix, "--no-progress", timeout=600))
    assert f"fleet: {nf.address} (3 hosts)" in done.stderr.splitlines()
    (matrix_id,) = [line.split()[-1] for line in done.stderr.splitlines()
                    if line.startswith("matrix id:")]
    rows = sql(nf, "SELECT host, engine, status FROM runs WHERE matrix_id = %s", matrix_id)
    targets = sorted({f"{h}/{e}" for h, e, _ in rows})
    assert targets == ["h1/mlx", "h1/torch", "h2/torch", "h3/mlx"]
    assert [s for _, _, s in rows] == ["done"] * 8
    print(f"\ncross-backend matrix {matrix_id}: 8 expected / {len(rows)} done on {targets}")
    # A client that has only the token and the address (and the store's URL).
    checked = ok(drive(nf, "cli", "parity", matrix_id, "--address", nf.address, timeout=300))
    assert f"fleet: {nf.address} (3 hosts)" in checked.stderr.splitlines()
    for target in ("h1/mlx/cpu", "h1/torch/cpu", "h2/torch/cpu", "h3/mlx/cpu"):
        assert target in checked.stdout
    print(checked.stdout[-1500:])
    assert_no_secret_in_workers(nf)


def assert_no_secret_in_workers(nf) -> None:
    """The driver's DB password is in no process of any host (workers, raylets, agents)."""
    seen = 0
    for pid in nf.namespace_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except (OSError, psutil.Error):
            continue
        if "postgres" in cmdline:
            continue  # the database server itself
        seen += "WorkerActor" in cmdline
        assert SECRET.encode() not in environ, f"the driver's secret reached {cmdline[:120]}"
    assert seen >= 3, "no worker process found to inspect"


# ---- security from a namespace outside the fleet ----------------------------------------------


def test_outside_the_fleet_nothing_gets_in(nf) -> None:
    out = nf.host("out")
    assert not Path(out.home, ".ray", "auth_token").exists()
    # A bare ray.init waits ~20 s on Ray's own retries before it fails: started first, read last.
    bare = nf.popen(out, [sys.executable, "-c", "import ray; ray.init(address="
                          f"'{nf.address}', log_to_driver=False); print(ray.nodes())"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    no_token = nf.specfleet(out, "fleet", "status", "--address", nf.address, timeout=60)
    assert no_token.returncode == 2 and "no Ray token" in no_token.stderr
    wrong = nf.specfleet(out, "fleet", "status", "--address", nf.address, timeout=60,
                         env=nf.env(out, RAY_AUTH_TOKEN="0" * 64))
    assert wrong.returncode == 2 and "h1" not in wrong.stdout, wrong.stdout
    assert wrong.stderr.strip() == (f"error: {nf.address} (from --address): the Ray head there "
                                    "refuses the token in $RAY_AUTH_TOKEN: set it to the head's "
                                    "token"), wrong.stderr
    bare_out, _ = bare.communicate(timeout=90)
    assert bare.returncode != 0 and "h1" not in bare_out
    probe = ("import socket,sys; s=socket.socket(); s.settimeout(5); "
             "print(s.connect_ex((sys.argv[1], 8265)))")
    assert nf.run(out, [sys.executable, "-c", probe, nf.head.ip]).stdout.strip() != "0"
    assert nf.run("h1", [sys.executable, "-c", probe, "127.0.0.1"]).stdout.strip() == "0"
    for host in ("h1", "h2", "h3", "cli"):
        token = Path(nf.host(host).home, ".ray", "auth_token")
        assert token.stat().st_mode & 0o777 == 0o600, host
    print(f"\nsecurity: no token -> exit 2; wrong token -> exit {wrong.returncode}; "
          f"bare ray.init -> exit {bare.returncode}; dashboard closed outside the head")


