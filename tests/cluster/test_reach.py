"""Which fleet a command uses: --address, $SPECFLEET_ADDRESS, $RAY_ADDRESS, joined, embedded."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest

from specfleet.cluster import noderecord
from specfleet.cluster.reach import (
    EMBEDDED,
    JOINED,
    announce,
    check_address,
    choose_fleet,
    connect_error,
    host_port,
    join_host_port,
    ray_cluster_file,
)
from specfleet.errors import UserError

BOTH = {"SPECFLEET_ADDRESS": "10.0.0.2:6379", "RAY_ADDRESS": "10.0.0.3:6379"}


def test_the_order_is_flag_then_environment_then_joined_then_embedded() -> None:
    joined = "10.0.0.4:6379"
    assert choose_fleet("10.0.0.1:6379", env=BOTH, joined=joined).source == "--address"
    assert choose_fleet(None, env=BOTH, joined=joined).address == "10.0.0.2:6379"
    ray_only = choose_fleet(None, env={"RAY_ADDRESS": "10.0.0.3:6379"}, joined=joined)
    assert (ray_only.address, ray_only.source) == ("10.0.0.3:6379", "$RAY_ADDRESS")
    assert choose_fleet(None, env={}, joined=joined).source == JOINED
    alone = choose_fleet(None, env={}, joined=None)
    assert alone.embedded and alone.source == EMBEDDED


def test_embedded_forces_the_private_fleet_and_refuses_an_address_beside_it() -> None:
    assert choose_fleet(None, embedded=True, env=BOTH, joined="10.0.0.4:6379").embedded
    with pytest.raises(UserError, match="--embedded and --address: give one of them"):
        choose_fleet("10.0.0.1:6379", embedded=True)


def test_a_malformed_address_names_where_it_came_from() -> None:
    with pytest.raises(UserError, match=r"^\$RAY_ADDRESS 'a..b:1': expected HOST:PORT"):
        choose_fleet(None, env={"RAY_ADDRESS": "a..b:1"}, joined=None)


def test_ray_address_auto_is_the_cluster_ray_start_recorded_here(tmp_path) -> None:
    env = {"RAY_ADDRESS": "auto", "RAY_TMPDIR": str(tmp_path)}
    record = tmp_path / "ray" / "ray_current_cluster"
    assert ray_cluster_file(env) == record
    assert ray_cluster_file({}) == Path("/tmp/ray/ray_current_cluster")
    if sys.platform.startswith("linux"):  # Ray reads $TMPDIR there only
        assert ray_cluster_file({"TMPDIR": "/t"}) == Path("/t/ray/ray_current_cluster")
    with pytest.raises(UserError, match=r"^\$RAY_ADDRESS=auto: no Ray cluster started on this "
                                        r"machine \(.*ray_current_cluster, which `ray start"):
        choose_fleet(None, env=env, joined="10.0.0.4:6379")  # never the joined fleet instead
    record.parent.mkdir()
    record.write_text("10.0.0.7:6379")  # as `ray start` writes it: no newline
    auto = choose_fleet(None, env=env, joined=None)
    assert auto.address == "10.0.0.7:6379"
    assert auto.source == f"$RAY_ADDRESS=auto via {record}"
    record.write_text("gibberish\n")
    with pytest.raises(UserError, match=r"auto via .*ray_current_cluster 'gibberish': expected "
                                        r"HOST:PORT"):
        choose_fleet(None, env=env, joined=None)


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "head-1.lan:6380", "[::1]:6379",
                                     "[fd00::10]:6379", "[::ffff:10.0.0.1]:6379",
                                     "[fe80::1%eth0]:6379"])
def test_an_address_is_split_as_ray_splits_it(address) -> None:
    from ray._common.network_utils import parse_address

    assert check_address(address) == address
    host, port = parse_address(address)  # what `ray.init(address=...)` will connect to
    assert host_port(address) == (host, int(port))


@pytest.mark.parametrize(("host", "address"), [("10.0.0.1", "10.0.0.1:6379"),
                                               ("fd00::10", "[fd00::10]:6379")])
def test_an_address_this_tool_writes_is_one_it_reads(host, address) -> None:
    # `fleet up --node-ip fd00::10` printed `fleet join fd00::10:6379`, which join refuses.
    assert join_host_port(host, 6379) == address
    assert check_address(address) == address and host_port(address) == (host, 6379)


@pytest.mark.parametrize("address", ["::1:6379", "fd00::10:6379"])
def test_an_ipv6_address_without_brackets_is_refused(address) -> None:
    with pytest.raises(UserError, match=rf"^--address '{address}': an IPv6 address goes in "
                                        r"brackets; expected \[HOST\]:PORT, e.g. \[fd00::10\]:6379$"):
        check_address(address)


@pytest.mark.parametrize("address", ["[::1]", "[nothex]:6379", "[10.0.0.1]:6379", "[::1]x:1",
                                     "[::1]:0", "[]:6379"])
def test_a_malformed_bracketed_address_is_refused(address) -> None:
    # A bracketed (IPv6) address is shown an IPv6 example; it was shown an IPv4 one.
    with pytest.raises(UserError, match=r"expected HOST:PORT, e.g. \[fd00::10\]:6379$"):
        check_address(address)


def test_a_bracketed_address_reaches_an_ipv6_listener() -> None:
    try:
        listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with listener:
        port = listener.getsockname()[1]
        assert connect_error(f"[::1]:{port}", 2.0) is None


@pytest.mark.parametrize(("address", "what"), [
    ("ray://10.0.0.1:10001", "a Ray Client address"),
    ("http://10.0.0.1:8265", "a Ray dashboard address"),  # what `ray job submit` reads
    ("gcs://10.0.0.1:6379", "a gcs:// URL"),
])
def test_an_address_with_a_scheme_is_not_the_heads(address, what) -> None:
    with pytest.raises(UserError, match=rf"^\$RAY_ADDRESS '{address}': {what}, which specfleet "
                                        r"does not use; expected the head's HOST:PORT"):
        choose_fleet(None, env={"RAY_ADDRESS": address}, joined=None)


def test_the_announcement_line() -> None:
    assert announce(choose_fleet(None, env={}, joined=None), 1) == (
        "fleet: embedded (this machine only)")
    assert announce(choose_fleet("head1:6379", env={}), 3) == "fleet: head1:6379 (3 hosts)"
    assert announce(choose_fleet("head1:6379", env={}), 1) == "fleet: head1:6379 (1 host)"


def test_up_and_join_are_remembered_until_leave(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path))
    assert noderecord.joined_fleet() is None
    assert choose_fleet(None, env={}).embedded  # never joined: the embedded fleet
    noderecord.save(noderecord.NodeRecord("10.0.0.5:6379", "h2", False, str(tmp_path / "r")))
    assert choose_fleet(None, env={}).address == "10.0.0.5:6379"
    noderecord.forget()
    assert choose_fleet(None, env={}).embedded


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "head:0", "[::1]:65536"])
def test_a_port_out_of_range_is_named(address) -> None:
    # It said only "expected HOST:PORT", though the address had that shape.
    port = address.rpartition(":")[2]
    with pytest.raises(UserError, match=rf"^--address '{re.escape(address)}': port {port} is "
                                        r"outside 1-65535; expected HOST:PORT"):
        check_address(address)
