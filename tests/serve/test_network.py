"""`specfleet serve --host` on a real non-loopback address: served from inside a network
namespace (tools/netfleet.py: its own address on a private bridge, its own HOME holding the
fleet's token where `fleet join` users put it) and fetched from outside the namespace, with and
without the token. Skips (with the reason) where namespaces cannot be made: not root, no `ip`.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.serve.seed import BASE
from tests.serve.serving import stop, wait_listening

if "netfleet" not in sys.modules:  # tests/cluster/test_netfleet.py loads it the same way
    _spec = importlib.util.spec_from_file_location(
        "netfleet", Path(__file__).parents[2] / "tools" / "netfleet.py")
    sys.modules["netfleet"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["netfleet"])
netfleet = sys.modules["netfleet"]

WHY_NOT = netfleet.can_build()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

TOKEN = "f00dfacecafe0123456789abcdef4567"
PORT = 8266  # the default: the namespace is new, nothing else listens in it


@pytest.fixture(scope="module")
def shared_view(seeded_url):
    """`specfleet serve --host <the namespace's address>` with no --token-file."""
    fleet = netfleet.create({}, outside=("web",))
    proc = None
    try:
        host = fleet.host("web")
        token = Path(host.home, ".ray", "auth_token")
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        log = Path(fleet.root, "serve.log")
        env = fleet.env(host, PYTHONPATH=os.pathsep.join(sys.path))
        with open(log, "w") as err:
            proc = fleet.popen(host, [str(netfleet.BIN / "specfleet"), "serve", "--host",
                                      host.ip, "--db", seeded_url], env=env,
                               stdout=subprocess.DEVNULL, stderr=err)
        wait_listening(proc, host.ip, PORT, log)
        yield f"http://{host.ip}:{PORT}", log, token
    finally:
        if proc is not None:
            stop(proc)
        assert not netfleet.destroy(fleet)


def test_a_view_on_the_network_needs_the_fleets_token(shared_view):
    base, log, token_file = shared_view
    assert not ipaddress.ip_address(base.split("//")[1].split(":")[0]).is_loopback
    lines = log.read_text().splitlines()
    assert lines[0].endswith(f"; needs a token: the fleet's token ({token_file}))"), lines
    assert lines[1].startswith("note: --host 10."), lines
    with httpx.Client(base_url=base, trust_env=False, timeout=30) as outside:
        for path in ("/api/matrices", f"/api/matrices/{BASE}", f"/api/matrices/{BASE}/runs"):
            refused = outside.get(path)
            assert refused.status_code == 401 and BASE not in refused.text, path
            assert outside.get(path, headers={"Authorization": "Bearer " + TOKEN[::-1]}) \
                .status_code == 401, path
            answered = outside.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
            assert answered.status_code == 200 and BASE in answered.text, path
            assert answered.headers["cache-control"] == "no-store"
            assert "server" not in answered.headers  # a stranger learns nothing of the software
        page = outside.get(f"/matrices/{BASE}")
        assert page.status_code == 303
        assert page.headers["location"] == f"/login?next=%2Fmatrices%2F{BASE}"
        logged_in = outside.post("/login", data={"token": TOKEN, "next": f"/matrices/{BASE}"})
        assert logged_in.status_code == 303 and TOKEN not in logged_in.headers["set-cookie"]
        assert outside.get(f"/matrices/{BASE}").status_code == 200
