"""A fleet of real hosts on one Linux machine: one network namespace per host, each with its
own address on a private bridge, its own HOME (own ~/.ray token copy) and Ray temp dir, joined
with the real CLI. The namespace tests (tests/cluster/test_netfleet*.py) use it; a developer can
start and stop the same fleet by hand (as root):

    .venv/bin/python tools/netfleet.py up --host h1=mlx,torch --host h2=torch --host h3=mlx --state /tmp/nf.json
    .venv/bin/python tools/netfleet.py exec --state /tmp/nf.json h1 -- specfleet fleet status
    .venv/bin/python tools/netfleet.py down --state /tmp/nf.json

`up` picks a free 10.x.y.0/24 (on no interface, in no route), creates bridge `sfbr<id>`, a veth
pair per host (`eth0` inside namespace `sf<id>-<host>`, addresses .11, .12, ...; the bridge is
.1), starts the first host with `specfleet fleet up`, copies its token to every other host's
~/.ray/auth_token (mode 600, as the README tells users) and runs `specfleet fleet join`. `down`
kills only processes inside its own namespaces, then deletes namespaces, bridge and files; it
runs to the end even after a failure. Extra hosts with no engines (`--outside NAME`) get a
namespace and an address but never join: a machine on the network that is not in the fleet.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
HEAD_PORT = 6379
# Ray declares a node dead after 3 missed 1 s health checks (its default: 5 x 3 s).
FAST_HEALTH_ENV = {
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
_CMD_TIMEOUT_S = 300
SUBNET_LOCK = "/tmp/specfleet-netfleet-subnet.lock"


@dataclass
class NetHost:
    """One namespace host: its name, namespace, address, HOME and Ray temp dir."""

    name: str
    ns: str
    ip: str
    home: str
    temp_dir: str
    engines: list[str] | None  # None: all engines; [] : outside the fleet
    veth: str


@dataclass
class NetFleet:
    """The namespaces, bridge and hosts of one test fleet (saved as JSON for `down`)."""

    fid: str
    subnet: str
    bridge: str
    root: str
    hosts: list[NetHost] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    host_env: dict[str, dict[str, str]] = field(default_factory=dict)  # one host's own settings
    db_url: str = ""  # a store for drivers (the tests serve PostgreSQL from the head)
    fast_health: bool = True  # False: Ray's shipped health checks, what `fleet up` gives users
    pg_root: str = ""  # the PostgreSQL of `start_postgres`: its folder and binaries
    pg_bin: str = ""

    @property
    def head(self) -> NetHost:
        return self.hosts[0]

    @property
    def address(self) -> str:
        return f"{self.head.ip}:{HEAD_PORT}"

    def host(self, name: str) -> NetHost:
        return next(h for h in self.hosts if h.name == name)

    def env(self, host: NetHost, **extra: str) -> dict[str, str]:
        """A host's environment: its own HOME, this checkout's code, fast health checks unless
        the fleet runs Ray's shipped ones."""
        keep = ("PATH", "PYTHONPATH", "LANG", "OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "SPECFLEET_THREADS", "SPECFLEET_MODELS")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        env["PATH"] = f"{BIN}:{env['PATH']}"
        env.update(HOME=host.home, RAY_USAGE_STATS_ENABLED="0")
        if self.fast_health:
            env.update(FAST_HEALTH_ENV)
        env.update(self.extra_env)
        env.update(self.host_env.get(host.name, {}))
        env.update(extra)
        return env

    def run(self, host: NetHost | str, args: list[str], timeout: float = _CMD_TIMEOUT_S,
            env: dict[str, str] | None = None, check: bool = False) -> subprocess.CompletedProcess:
        """Run `args` inside the host's namespace with its environment."""
        host = self.host(host) if isinstance(host, str) else host
        full = env if env is not None else self.env(host)
        cmd = ["ip", "netns", "exec", host.ns, "env", "-i", *[f"{k}={v}" for k, v in full.items()],
               *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{host.name}: {' '.join(args)} -> {done.returncode}: "
                               f"{(done.stderr or done.stdout)[-2000:]}")
        return done

    def popen(self, host: NetHost | str, args: list[str], env: dict[str, str] | None = None,
              **kwargs) -> subprocess.Popen:
        host = self.host(host) if isinstance(host, str) else host
        full = env if env is not None else self.env(host)
        cmd = ["ip", "netns", "exec", host.ns, "env", "-i", *[f"{k}={v}" for k, v in full.items()],
               *args]
        return subprocess.Popen(cmd, **kwargs)

    def specfleet(self, host: NetHost | str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run(host, [str(BIN / "specfleet"), *args], **kwargs)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> NetFleet:
        data = json.loads(Path(path).read_text())
        data["hosts"] = [NetHost(**h) for h in data["hosts"]]
        return cls(**data)

    # ---- network ----------------------------------------------------------------------

    def link(self, host: str, up: bool) -> None:
        """Cut (or restore) a host's link: its veth end on the bridge goes down (or up)."""
        _ip("link", "set", self.host(host).veth, "up" if up else "down")

    def namespace_pids(self) -> list[int]:
        pids: list[int] = []
        for host in self.hosts:
            done = subprocess.run(["ip", "netns", "pids", host.ns], capture_output=True,
                                  text=True, timeout=30)
            pids += [int(p) for p in done.stdout.split()]
        return pids


def can_build() -> str | None:
    """None when namespaces can be made here, else why not (the tests skip with it)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"sfprobe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")


def free_subnet(tries: int = 50) -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 on no interface of this machine and in no route."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    used += subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    taken = [ipaddress.ip_network(word, strict=False) for word in used.split()
             if "/" in word and word[0].isdigit()]
    for _ in range(tries):
        net = ipaddress.ip_network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free 10.x.y.0/24 found")


def create(hosts: dict[str, list[str] | None], outside: tuple[str, ...] = (),
           fast_health: bool = True) -> NetFleet:
    """Namespaces, bridge, veths and addresses (no Ray yet). On failure, removes what it made.
    `fast_health=False` leaves Ray's health checks at their shipped defaults."""
    fid = f"{os.getpid() % 10000:04d}{random.randint(0, 99):02d}"
    root = tempfile.mkdtemp(prefix=f"sfnf{fid}-")  # short: Ray's socket paths live under it
    fleet = NetFleet(fid, "", f"sfbr{fid}", root, fast_health=fast_health)
    try:
        # Fleets built at once (two test workers) must not pick the same /24: pick and claim
        # it (the bridge's address) under one machine-wide lock.
        with open(SUBNET_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            net = free_subnet()
            fleet.subnet = str(net)
            addrs = list(net.hosts())
            _ip("link", "add", fleet.bridge, "type", "bridge")
            _ip("addr", "add", f"{addrs[0]}/24", "dev", fleet.bridge)
        _ip("link", "set", fleet.bridge, "up")
        every = [*hosts.items(), *((name, []) for name in outside)]
        for i, (name, engines) in enumerate(every):
            _add_host(fleet, name, engines, str(addrs[10 + i]))
    except BaseException:
        destroy(fleet)
        raise
    return fleet


def _add_host(fleet: NetFleet, name: str, engines: list[str] | None, ip: str) -> None:
    host = NetHost(name, f"sf{fleet.fid}-{name}", ip, f"{fleet.root}/{name}",
                   f"{fleet.root}/r-{name}", engines, f"sfv{fleet.fid}{name}"[:15])
    Path(host.home, ".ray").mkdir(parents=True)
    _share_models(Path(host.home))
    _ip("netns", "add", host.ns)
    fleet.hosts.append(host)  # from here on `destroy` removes it
    _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
    _ip("link", "set", host.veth, "master", fleet.bridge)
    _ip("link", "set", host.veth, "up")
    _ip("addr", "add", f"{ip}/24", "dev", "eth0", ns=host.ns)
    _ip("link", "set", "eth0", "up", ns=host.ns)
    _ip("link", "set", "lo", "up", ns=host.ns)


def _share_models(home: Path) -> None:
    """The host's own data dir, but the bundled model already fetched on this machine."""
    from specfleet.dirs import specfleet_home

    models = specfleet_home() / "models"
    cache = home / ".cache" / "specfleet"
    cache.mkdir(parents=True)
    if models.exists():
        (cache / "models").symlink_to(models)


def start(fleet: NetFleet, num_cpus: int = 1) -> None:
    """`fleet up` on the first host, token copied to the others, then `fleet join` on each at
    once, as on separate machines (each join waits for its worker's self-test)."""
    head = fleet.head
    fleet.specfleet(head, "fleet", "up", "--name", head.name, "--node-ip", head.ip,
                    "--num-cpus", str(num_cpus), "--temp-dir", head.temp_dir,
                    *_engines_args(head), check=True)
    token = Path(head.home, ".ray", "auth_token")
    joining = [host for host in fleet.hosts[1:] if host.engines != []]
    for host in joining:
        copy_token(token, host)
    with ThreadPoolExecutor(max_workers=max(1, len(joining))) as pool:
        for joined in [pool.submit(join, fleet, host, num_cpus) for host in joining]:
            joined.result()  # re-raises a join's failure


def copy_token(token: Path, host: NetHost) -> None:
    """What a user does: scp the head's token, then chmod 600."""
    target = Path(host.home, ".ray", "auth_token")
    shutil.copyfile(token, target)
    target.chmod(0o600)


def join(fleet: NetFleet, host: NetHost, num_cpus: int = 1, *extra: str) -> None:
    fleet.specfleet(host, "fleet", "join", fleet.address, "--name", host.name, "--node-ip",
                    host.ip, "--num-cpus", str(num_cpus), "--temp-dir", host.temp_dir,
                    *_engines_args(host), *extra, check=True)


def _engines_args(host: NetHost) -> list[str]:
    return ["--engines", ",".join(host.engines)] if host.engines else []


def destroy(fleet: NetFleet) -> list[str]:
    """Kill every process inside the fleet's namespaces, delete namespaces, veths, bridge and
    files. Goes on past every failure; returns what could not be removed."""
    problems: list[str] = []
    for _ in range(3):  # processes may fork while we kill (bounded)
        pids = fleet.namespace_pids()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    for host in fleet.hosts:
        for cmd in (["link", "del", host.veth], ["netns", "del", host.ns]):
            done = subprocess.run(["ip", *cmd], capture_output=True, text=True, timeout=30)
            if done.returncode != 0 and "Cannot find" not in done.stderr \
                    and "No such" not in done.stderr:
                problems.append(f"ip {' '.join(cmd)}: {done.stderr.strip()}")
    subprocess.run(["ip", "link", "del", fleet.bridge], capture_output=True, timeout=30)
    shutil.rmtree(fleet.root, ignore_errors=True)
    return problems


PG_PORT = 5432


def start_postgres(fleet: NetFleet, root: Path, password: str) -> str:
    """A throwaway PostgreSQL listening on the head's namespace address only; its URL (with
    `password`, which trust auth ignores: a secret to look for where it must not be).
    `destroy` kills it with the head's processes; `root` is the caller's to remove."""
    from tests.conftest import PG_SUPERUSER, _as_pg_user, _find_pg_bin

    bin_dir = _find_pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (tests/conftest.py installs it)")
    data = root / "data"
    subprocess.run(_as_pg_user([str(bin_dir / "initdb"), "-A", "trust", "-U", PG_SUPERUSER,
                                "--no-sync", "-D", str(data)]), check=True, capture_output=True)
    with open(data / "pg_hba.conf", "a") as hba:
        hba.write(f"host all all {fleet.subnet} trust\n")
    fleet.pg_root, fleet.pg_bin = str(root), str(bin_dir)
    pg_ctl(fleet, "start")
    return f"postgresql+psycopg://{PG_SUPERUSER}:{password}@{fleet.head.ip}:{PG_PORT}/postgres"


def pg_ctl(fleet: NetFleet, action: str) -> None:
    """Start or stop (fast) the store's server inside the head's namespace."""
    from tests.conftest import _as_pg_user

    root = Path(fleet.pg_root)
    options = (f"-c listen_addresses={fleet.head.ip} -p {PG_PORT} -k {root} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off")
    extra = ["-o", options] if action == "start" else ["-m", "fast"]
    fleet.run(fleet.head, _as_pg_user([str(Path(fleet.pg_bin) / "pg_ctl"), "-D",
                                       str(root / "data"), "-l", str(root / "log"), "-w", "-t",
                                       "60", *extra, action]),
              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, check=True, timeout=120)


def sql(fleet: NetFleet, query: str, *args) -> list[tuple]:
    """A query on the store's server, from this (the root) namespace."""
    import psycopg

    from tests.conftest import PG_SUPERUSER

    with psycopg.connect(host=fleet.head.ip, port=PG_PORT, user=PG_SUPERUSER, dbname="postgres",
                         connect_timeout=10) as conn:
        return conn.execute(query, args).fetchall()


def _parse_host(text: str) -> tuple[str, list[str] | None]:
    name, _, engines = text.partition("=")
    return name, [e for e in engines.split(",") if e] or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create the namespaces and start the fleet")
    up.add_argument("--host", action="append", required=True, help="NAME[=ENGINE,ENGINE]")
    up.add_argument("--outside", action="append", default=[], help="a namespace not in it")
    up.add_argument("--ray-defaults", action="store_true",
                    help="keep Ray's shipped health checks (default: 1 s x 3, for tests)")
    for name in ("up", "down", "exec"):
        p = up if name == "up" else sub.add_parser(name)
        p.add_argument("--state", required=True, help="JSON file describing the fleet")
    sub.choices["exec"].add_argument("host")
    sub.choices["exec"].add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "up":
        why = can_build()
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
        fleet = create(dict(map(_parse_host, args.host)), tuple(args.outside),
                       fast_health=not args.ray_defaults)
        fleet.save(args.state)
        start(fleet)
        print(f"fleet at {fleet.address}: " + ", ".join(f"{h.name} {h.ip} ({h.ns})"
                                                        for h in fleet.hosts))
        return 0
    fleet = NetFleet.load(args.state)
    if args.cmd == "down":
        problems = destroy(fleet)
        for line in problems:
            print(f"warning: {line}", file=sys.stderr)
        Path(args.state).unlink(missing_ok=True)
        return 1 if problems else 0
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    done = fleet.run(args.host, rest)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
