"""The fleet on a real multi-node Ray cluster: discovery, status, health, a host lost and back,
joins refused on mismatched versions, the CLI as a token-auth client and the embedded fleet."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import ray
from ray.exceptions import RayActorError

from specfleet.cli.fleet import render_status
from specfleet.cluster import fleet as fleet_mod
from specfleet.cluster import rayinit
from specfleet.cluster.fleet import (
    DEAD,
    HEALTHY,
    SUSPECT,
    discover_hosts,
    fleet_status,
    health,
    wait_for_health,
)
from specfleet.cluster.localfleet import LocalFleet
from specfleet.cluster.membership import check_versions, local_versions, read_head_versions
from specfleet.cluster.noderecord import NodeRecord
from specfleet.cluster.raystart import join_command, start_env, start_failure, up_command
from specfleet.cluster.raytoken import ensure_token
from specfleet.errors import UserError
from specfleet.jobs.run import RunSpec, Target
from specfleet.workers.actor import get_worker, start_worker, stop_worker, wait_ready
from tests.cluster.raycluster import wait_until

TIMEOUT_S = 30
SPECFLEET = [os.path.join(os.path.dirname(sys.executable), "specfleet")]


@pytest.fixture(scope="module")
def fleet():
    with LocalFleet(
        ["h1", "h2"],
        kind="linux-cpu",
        worker_kwargs={"sample_period_s": 3600.0},
        distinct_machines=True,
    ) as local:
        local.start_workers()
        yield local


def spec(host: str, key: str, model: str = "script", max_tokens: int = 20) -> RunSpec:
    return RunSpec(
        run_key=key,
        target=Target(host=host, engine="toy", device="cpu"),
        model=model,
        prompt_name="p",
        prompt_text="one two three four. ",
        arm="auto",
        max_tokens=max_tokens,
    )


def cli(
    *args: str, env: dict | None = None, unset: tuple[str, ...] = (), timeout: float = 120
) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k not in unset} | (env or {})
    return subprocess.run(
        [*SPECFLEET, *args], capture_output=True, text=True, timeout=timeout, env=child_env
    )


# ---- no cluster needed -------------------------------------------------------------------


def test_an_address_where_no_ray_head_answers_is_one_line_in_seconds(tmp_path) -> None:
    # A web server on the port: Ray's client raised RpcError after 41 s, as a traceback.
    import http.server
    import threading

    # A client holding a token of its own: ~/.ray/auth_token exists only once some embedded
    # fleet ran on this machine (a fresh one failed here, before the address was tried).
    token = tmp_path / "auth_token"
    token.write_text("0" * 64)
    token.chmod(0o600)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        done = cli("fleet", "status", "--address", address, timeout=90,
                   env={"RAY_AUTH_TOKEN_PATH": str(token)}, unset=("RAY_AUTH_TOKEN",))
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 2 and not done.stdout, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {address} (from --address): what answers there is not "
                                  "a Ray head ("), done.stderr
    assert done.stderr.count("\n") == 1 and "expected the HOST:PORT" in done.stderr
    # A web server answers no HTTP/2 greeting: said at once, not after Ray's client gave up
    # (15 s at a 5 s timeout, 40 s at its own).
    assert took < 10, took


def test_join_to_something_that_is_no_ray_head_is_one_line_without_rays_logs(
        monkeypatch, capfd) -> None:
    # `fleet join` waited 40 s on GcsClient's own timeouts, and Ray's C++ client logged them.
    import http.server
    import threading

    from specfleet.cluster import reach

    monkeypatch.setattr(reach, "HEAD_ANSWER_MS", 1000)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(UserError) as err:
            read_head_versions(address)
    finally:
        server.shutdown()
        server.server_close()
    assert str(err.value).startswith(f"cannot read versions from head {address}: ")
    assert str(err.value).endswith("; expected the HOST:PORT `specfleet fleet up` printed on "
                                   "the head")
    assert "gcs_client" not in capfd.readouterr().err


def test_join_refuses_mismatched_versions_in_one_line() -> None:
    head = {"python": "3.11.7", "ray": "2.60.0"}
    check_versions(head, dict(head))
    with pytest.raises(UserError) as err:
        check_versions(head, {"python": "3.11.9", "ray": "2.59.1"})
    message = str(err.value)
    assert "\n" not in message
    assert "Python 3.11.7 (this host has 3.11.9)" in message
    assert "ray[default]==2.60.0 (this host has 2.59.1)" in message


def test_join_of_an_unreachable_head_is_one_line_at_once() -> None:
    start = time.monotonic()
    done = cli("fleet", "join", "127.0.0.1:1", "--name", "h9", env={"RAY_AUTH_TOKEN": "x" * 64})
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach the head at 127.0.0.1:1: ")
    assert line.endswith("; expected the HOST:PORT `specfleet fleet up` printed on the head, "
                         "reachable from here")
    assert time.monotonic() - start < 30


def test_a_token_path_that_is_a_folder_is_refused_and_left_as_it_was(tmp_path,
                                                                     monkeypatch) -> None:
    folder = tmp_path / "auth_token"
    folder.mkdir()
    folder.chmod(0o755)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(folder))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    with pytest.raises(UserError, match="auth_token: is a directory; expected the head's"):
        ensure_token(create=True)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # it used to be chmodded to 600


def test_a_client_without_a_token_is_told_where_to_put_it(tmp_path) -> None:
    missing = tmp_path / "nope" / "auth_token"
    done = cli(
        "fleet",
        "status",
        "--address",
        "127.0.0.1:6379",
        env={"RAY_AUTH_TOKEN_PATH": str(missing)},
        unset=("RAY_AUTH_TOKEN",),
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: no Ray token at {missing}: copy the head's token file there (mode 600) "
        "or set RAY_AUTH_TOKEN"
    )


def test_token_file_is_created_and_tightened_to_0600(tmp_path, monkeypatch) -> None:
    path = tmp_path / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    assert ensure_token(create=True) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text()) == 64
    path.chmod(0o644)  # what a bare `ray.init()` leaves behind
    ensure_token(create=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_while_ray_starts_is_held_then_raised_as_ctrl_c(signum) -> None:
    # Cut short between creating its core worker and keeping it, ray.init left a core
    # worker that crashed the process (SIGSEGV) as it exited: the start runs to its end.
    import signal

    import ray._private.utils as ray_utils

    def ours(_signum, _frame) -> None:
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, ours) for sig in (signal.SIGINT, signal.SIGTERM)}
    finished = []
    try:
        with pytest.raises(KeyboardInterrupt), rayinit.signals_held_while_ray_starts():
            ray_utils.set_sigterm_handler(lambda sig, _frame: sys.exit(sig))  # what Ray does
            os.kill(os.getpid(), getattr(signal, signum))
            time.sleep(0.05)  # the handler runs between bytecodes
            finished.append("ray.init's end")
        assert finished == ["ray.init's end"]
        # Ours again after, never Ray's bare exit (status 15, runs not marked interrupted).
        assert signal.getsignal(signal.SIGTERM) is ours and signal.getsignal(signal.SIGINT) is ours
        assert ray_utils.set_sigterm_handler.__name__ == "set_sigterm_handler"
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_second_signal_while_ray_starts_stops_at_once() -> None:
    import signal

    finished = []
    with pytest.raises(KeyboardInterrupt), rayinit.signals_held_while_ray_starts():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        finished.append("held")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        finished.append("ray.init's end")
    assert finished == ["held"]


def test_nothing_is_held_once_ray_has_started() -> None:
    import signal

    # From Python's own Ctrl-C handler, whatever a module run earlier on this xdist worker
    # left (the test read that handler back when it came after one that had changed it).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with rayinit.signals_held_while_ray_starts():
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):  # the default Ctrl-C handler is back
            os.kill(os.getpid(), signal.SIGINT)
            # Another thread (Ray's, torch's) may take the signal: the main thread runs the
            # handler at its next bytecode, after a sleep returns, so sleep in short steps.
            for _ in range(100):
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_cut_short_ray_init_leaves_no_process_of_ours(tmp_path) -> None:
    # In a child of its own: the guard stops every process its caller started, and this
    # test process may hold a Ray cluster of other tests.
    code = textwrap.dedent("""
        import subprocess, sys, time
        from specfleet.cluster.rayinit import stop_what_a_cut_short_init_started
        grand = "import subprocess, time; subprocess.Popen(['sleep', '120']); time.sleep(120)"
        child = subprocess.Popen([sys.executable, "-c", grand])
        import psutil
        for _ in range(300):  # until the grandchild runs, as Ray's agents under its raylet
            tree = psutil.Process().children(recursive=True)
            if len(tree) == 2:
                break
            time.sleep(0.1)
        print(" ".join(str(p.pid) for p in tree), flush=True)
        with stop_what_a_cut_short_init_started():
            raise KeyboardInterrupt  # Ctrl-C inside ray.init
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert "KeyboardInterrupt" in done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2  # the child and the grandchild it started
    import psutil

    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
              for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids
                if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_an_embedded_fleet_that_does_not_start_is_one_line(tmp_path) -> None:
    # Seven commands at once on 2 cores: Ray's "The current node timed out during startup"
    # came up as a traceback. In a child of its own: a failed start stops the processes its
    # caller started, and this test process may hold a Ray cluster of other tests.
    code = textwrap.dedent("""
        from specfleet.cluster import fleet
        from specfleet.errors import UserError
        def timed_out(*args):
            raise Exception("The current node timed out during startup. This could happen "
                            "because some of the raylet failed to startup or the GCS has "
                            "become overloaded.")
        fleet._init_embedded = timed_out
        try:
            fleet.connect(None)
        except UserError as err:
            print(err)
        def a_bug(*args):
            raise RuntimeError("a bug of ours")
        fleet._init_embedded = a_bug
        try:
            fleet.connect(None)
        except RuntimeError as err:  # not made a one-line refusal
            print(type(err).__name__, err)
    """)
    env = dict(os.environ, SPECFLEET_RUNTIME_DIR=str(tmp_path / "rt"),
               RAY_AUTH_TOKEN_PATH=str(tmp_path / "token"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"the embedded fleet did not start: Ray said 'The current node timed out during "
        r"startup\. This could happen because some of the raylet failed to startup or the GCS "
        r"has become overloaded\.' \(load [0-9.]+ on [0-9]+ CPUs; its logs: \S+\); "
        r"expected Ray's "
        r"processes to start: try again once the machine is less busy, or read the logs\n"
        r"RuntimeError a bug of ours\n",
        done.stdout), done.stdout


def test_ray_start_command_lines() -> None:
    up = up_command("mac1", "mac-mlx", port=6380, node_ip="10.0.0.5")
    assert up[:3] == ["ray", "start", "--head"] and "--dashboard-host=127.0.0.1" in up
    assert "--labels=specfleet.host=mac1,specfleet.kind=mac-mlx" in up
    assert '--resources={"specfleet_slot": 1}' in up and "--node-ip-address=10.0.0.5" in up
    join = join_command("10.0.0.1:6379", "spark1", "gb10-cuda", num_cpus=20)
    assert join[:3] == ["ray", "start", "--address=10.0.0.1:6379"] and "--num-cpus=20" in join
    assert start_env("darwin")["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"
    assert start_env("linux")["RAY_AUTH_MODE"] == "token"


def test_a_head_already_running_here_is_said_in_one_line_of_what_to_do() -> None:
    # A second `fleet up` printed Ray's "ray start --head failed: ConnectionError: Ray is
    # trying to start at ...:6379, but is already running ... use --port".
    cmd = up_command("head1", "linux-cpu")
    output = ("Local node IP: 10.0.0.1\nConnectionError: Ray is trying to start at "
              "10.0.0.1:6379, but is already running at 10.0.0.1:6379. Please specify a "
              "different port using the `--port` flag of `ray start` command.\n")
    head = NodeRecord(address="10.0.0.1:6379", host="head1", head=True, temp_dir="/tmp/r")
    assert start_failure(cmd, output, head) == (
        "this machine already runs the fleet head head1 (10.0.0.1:6379); `specfleet fleet "
        "status` shows it, `specfleet fleet leave` stops it before a new `fleet up`")
    assert start_failure(cmd, output, None) == (
        "a Ray head already runs at 10.0.0.1:6379 on this machine, not one this machine's "
        "`specfleet fleet up` recorded; `specfleet fleet status --address 10.0.0.1:6379` "
        "shows it, or give --port another port")
    assert start_failure(cmd, "ValueError: bad\n", head) == (
        "`ray start --head` failed: ValueError: bad")


# ---- on the shared two-host cluster --------------------------------------------------------


@pytest.mark.slow
def test_hosts_are_discovered_by_label_and_reported(fleet: LocalFleet) -> None:
    hosts = discover_hosts()
    assert [(h.host, h.kind, h.alive) for h in hosts] == [
        ("h1", "linux-cpu", True),
        ("h2", "linux-cpu", True),
    ]
    rows = {r["host"]: r for r in fleet_status()}
    assert set(rows) == {"h1", "h2"}
    for host, row in rows.items():
        assert row["health"] == HEALTHY and row["busy"] is False
        assert f"{host}/torch/cpu" in row["targets"]
        assert row["default_policies"][f"{host}/torch/cpu"] == "graded"
        assert row["versions"]["ray"] == ray.__version__
        assert row["machine_id"] == f"sim-{host}"  # simulated hosts, separate machines


@pytest.mark.slow
def test_the_head_reports_its_versions_to_a_joining_host(fleet: LocalFleet) -> None:
    assert read_head_versions(fleet.address) == local_versions()


@pytest.mark.slow
def test_join_checks_versions_before_starting_anything(fleet: LocalFleet, monkeypatch) -> None:
    from specfleet.cluster import membership

    def must_not_start(cmd: list[str]) -> None:
        raise AssertionError(f"ray start ran: {cmd}")

    head_python = platform.python_version()  # the test cluster runs this interpreter
    monkeypatch.setattr(membership, "_ray_start", must_not_start)
    monkeypatch.setattr(
        membership, "local_versions", lambda: {"python": "3.0.1", "ray": ray.__version__}
    )
    with pytest.raises(UserError) as err:
        membership.fleet_join(fleet.address, "h9")
    assert str(err.value) == (
        f"this host does not match the head: install Python {head_python} (this host has "
        "3.0.1), then run `specfleet fleet join` again"
    )


@pytest.mark.slow
def test_the_cli_connects_as_a_token_client(fleet: LocalFleet) -> None:
    done = cli("fleet", "status", "--address", fleet.address, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert [(r["host"], r["health"]) for r in rows] == [("h1", HEALTHY), ("h2", HEALTHY)]
    # A token the head refuses: one line at once, not Ray's ~20 s of retries.
    refused = cli("fleet", "status", "--address", fleet.address,
                  env={"RAY_AUTH_TOKEN": "0" * 64}, timeout=15)
    assert refused.returncode == 2 and not refused.stdout, refused.stdout
    assert refused.stderr.strip() == (f"error: {fleet.address} (from --address): the Ray head "
                                      "there refuses the token in $RAY_AUTH_TOKEN: set it to "
                                      "the head's token"), refused.stderr


@pytest.mark.slow
def test_a_lost_host_goes_suspect_and_comes_back_on_rejoin(fleet: LocalFleet) -> None:
    before = ray.get(get_worker("h2").ping.remote(), timeout=TIMEOUT_S)
    running = get_worker("h2").run.remote(spec("h2", "lost", "script:20ms", max_tokens=1000))
    wait_until_busy("h2")
    fleet.remove_host("h2")
    with pytest.raises(RayActorError):  # the scheduler marks such a run `interrupted`
        ray.get(running, timeout=TIMEOUT_S)
    assert wait_for_health("h2", (SUSPECT,), timeout_s=TIMEOUT_S).state == SUSPECT
    # The other host carries on meanwhile.
    assert (
        ray.get(get_worker("h1").run.remote(spec("h1", "ok")), timeout=TIMEOUT_S).status == "done"
    )
    assert [h.host for h in discover_hosts()] == ["h1"]
    fleet.add_host("h2")
    back = wait_for_health("h2", (HEALTHY,), timeout_s=90)
    assert back.ping["node_host_label"] == "h2"
    assert back.ping["node_id"] != before["node_id"] and back.ping["pid"] != before["pid"]
    again = ray.get(get_worker("h2").run.remote(spec("h2", "again")), timeout=TIMEOUT_S)
    assert again.status == "done"


@pytest.mark.slow
def test_job_resume_waits_for_its_lost_host_and_runs_its_prompts_when_it_rejoins(
    fleet: LocalFleet, tmp_path
) -> None:
    """`job resume` refused a job whose host had gone away (`not in this fleet`) though its
    worker comes back when the host rejoins: as `matrix resume`, it now waits up to --wait."""
    from specfleet.store import open_store

    url = f"sqlite:///{tmp_path / 'j.db'}"
    runs = [spec("h2", f"j{i}").model_copy(update={"prompt_name": f"line-{i}"})
            for i in (1, 2)]
    with open_store(url) as store:
        job_id = store.create_generation_job("batch", runs[0].target, "script", runs,
                                             driver_id="gone", lease_s=0.1)
    fleet.remove_host("h2")
    assert wait_for_health("h2", (SUSPECT,), timeout_s=TIMEOUT_S).state == SUSPECT
    # Past --wait the prompts stay pending for a later resume.
    short = cli("job", "resume", job_id, "--address", fleet.address, "--db", url, "--wait",
                "1s", "--no-progress", timeout=120)
    assert short.returncode == 1, short.stderr[-2000:]
    assert re.search(r"h2: gave up: suspect for \d+ s, longer than --wait 1 s; 2 of its runs "
                     r"stay pending", short.stderr), short.stderr
    assert short.stderr.splitlines()[-1] == f"job id: {job_id} (interrupted)", short.stderr
    with open_store(url, read_only=True) as store:
        assert store.get_generation_job(job_id).counts == {"pending": 2}
    resume = subprocess.Popen([*SPECFLEET, "job", "resume", job_id, "--address", fleet.address,
                               "--db", url, "--wait", "90s", "--no-progress"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = []
        assert resume.stderr is not None
        while not said or not said[-1].startswith("waiting up to"):
            line = resume.stderr.readline()
            assert line, f"job resume ended before it waited: {said}"
            said.append(line.rstrip("\n"))
            assert len(said) < 20, said
        assert said[-2:] == [
            f"job {job_id}: resuming 2 of 2 prompts (2 pending); 0 done kept",
            "waiting up to 90s for h2 (not in the fleet now; their runs stay pending until "
            "they answer)"], said
        fleet.add_host("h2")
        out, err = resume.communicate(timeout=150)
    finally:
        resume.kill()
    assert resume.returncode == 0, err[-2000:]
    assert err.splitlines()[-1] == f"job id: {job_id} (done)", err
    assert out.startswith("== line-1: 20 tokens,"), out
    with open_store(url, read_only=True) as store:
        assert store.get_generation_job(job_id).counts == {"done": 2}
    assert wait_for_health("h2", (HEALTHY,), timeout_s=90).state == HEALTHY


@pytest.mark.slow
def test_a_stopped_worker_is_dead_until_started_again(fleet: LocalFleet) -> None:
    handle = get_worker("h1")
    assert stop_worker("h1") is True
    deadline = time.monotonic() + TIMEOUT_S
    while get_worker("h1") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert health("h1").state == DEAD
    with pytest.raises(RayActorError):
        ray.get(handle.ping.remote(), timeout=TIMEOUT_S)
    wait_ready(start_worker("h1", fleet.worker_kwargs_for("h1")), TIMEOUT_S)
    assert health("h1").state == HEALTHY


def wait_until_busy(host: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not ray.get(get_worker(host).ping.remote(), timeout=TIMEOUT_S)["busy"]:
        assert time.monotonic() < deadline, f"{host} never started its run"
        time.sleep(0.05)


# ---- the embedded fleet (its own Ray instance, in a child process) --------------------------


@pytest.mark.slow
def test_the_embedded_fleet_starts_with_one_worker_for_this_machine(tmp_path) -> None:
    token = tmp_path / "auth_token"
    joined_nowhere(tmp_path)  # --embedded wins over the fleet this machine joined
    # Ray puts the driver's current folder on the workers' sys.path: run from the folder
    # above a clone, its `specfleet/` shadowed the install and every worker died starting
    # (`module 'specfleet' has no attribute '__version__'`, a 60-line traceback).
    (tmp_path / "specfleet").mkdir()
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "SPECFLEET_ADDRESS",
                              "RAY_ADDRESS")}
    done = subprocess.run(
        [*SPECFLEET, "fleet", "status", "--json", "--embedded"], cwd=tmp_path,
        env=child_env | {"RAY_AUTH_TOKEN_PATH": str(token), "SPECFLEET_HOST": "solo",
                         "SPECFLEET_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "fleet: embedded (this machine only)" in done.stderr.splitlines()
    (row,) = json.loads(done.stdout)
    assert row["host"] == "solo" and row["health"] == HEALTHY
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert fleet_mod.HEALTHY == HEALTHY
    # This machine's conditions now, read by its worker for real (the conditions section).
    now = row["conditions"]
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    assert now["reading"]["mem_total_gb"] == pytest.approx(total_kb / 2**20, abs=1e-3)
    assert now["throttled"] is False and "GB free" in now["summary"]
    text = render_status([row])
    assert text.splitlines()[-2:] == ["conditions:", f"  solo: {now['summary']}  ok"]


def joined_nowhere(home) -> None:
    """A node record of a fleet whose head is gone (port 1 on loopback answers nobody)."""
    from specfleet.cluster import noderecord

    (home / noderecord.RECORD_NAME).write_text(json.dumps(
        {"address": "127.0.0.1:1", "host": "me", "head": False, "temp_dir": str(home / "ray")}))


@pytest.mark.parametrize(("env", "source"), [
    ({}, "the fleet this machine joined"),
    ({"RAY_ADDRESS": "127.0.0.1:2"}, "$RAY_ADDRESS"),
    ({"RAY_ADDRESS": "127.0.0.1:2", "SPECFLEET_ADDRESS": "127.0.0.1:3"}, "$SPECFLEET_ADDRESS"),
])
def test_status_follows_the_fleet_this_machine_joined_and_says_where_from(
    tmp_path, env, source
) -> None:
    joined_nowhere(tmp_path)
    done = cli("fleet", "status", env={"SPECFLEET_HOME": str(tmp_path), "RAY_AUTH_TOKEN": "x",
                                       **env}, unset=("SPECFLEET_ADDRESS", "RAY_ADDRESS"))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"(from {source}): no Ray head answers there" in line


@pytest.mark.slow
def test_a_target_that_fails_its_self_test_gets_no_runs_and_says_why(
    fleet: LocalFleet, tmp_path
) -> None:
    """A worker whose torch runners drop their rollbacks (fault injection) fails its start-up
    self-test: `fleet status` shows it, and a matrix asking for that target is refused with
    the reason, while the host's other targets stay usable."""
    kwargs = fleet.worker_kwargs_for("h2")
    assert stop_worker("h2") is True
    assert wait_until(lambda: get_worker("h2") is None, TIMEOUT_S, 0.1)
    broken = {**kwargs, "self_test": True, "break_rollback": ("torch",), "engines": ["torch"]}
    try:
        wait_ready(start_worker("h2", broken), 120)
        info = ray.get(get_worker("h2").info.remote(), timeout=TIMEOUT_S)
        assert "h2/torch/cpu" not in info["targets"]
        assert info["failed_targets"]["torch/cpu"].split(": ")[1] == "CacheRollbackError"
        status = cli("fleet", "status", "--address", fleet.address)
        assert "self-test: torch/cpu FAILED: " in status.stdout, status.stdout + status.stderr
        matrix = tmp_path / "torch.yaml"
        matrix.write_text("name: m\ntargets: {hosts: [h2], engines: [torch]}\n"
                          "models: [smollm2-135m]\nprompts: [{name: p, text: hi}]\narms: [plain]\n")
        done = cli("matrix", "run", str(matrix), "--address", fleet.address,
                   "--db", f"sqlite:///{tmp_path / 'm.db'}")
        assert done.returncode == 2, done.stdout + done.stderr
        assert "warning: h2: torch/cpu left out: it failed its self-test (" in done.stderr
        assert "no target matches" in done.stderr and "Traceback" not in done.stderr
    finally:
        stop_worker("h2")
        assert wait_until(lambda: get_worker("h2") is None, TIMEOUT_S, 0.1)
        wait_ready(start_worker("h2", kwargs), TIMEOUT_S)


def test_a_silent_worker_is_unreachable_only_when_its_node_takes_no_connection(monkeypatch):
    import errno
    import socket

    with socket.socket() as closed:  # a port nothing listens on: refused, so reachable
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    node = fleet_mod.HostNode("h2", "linux-cpu", "n2", "127.0.0.1", True, port)
    assert fleet_mod.probe_node("127.0.0.1", port) is None
    assert fleet_mod._not_answering(node, "no answer within 3 s") == {
        "health": SUSPECT, "reason": "no answer within 3 s"}

    def cut(*_args, **_kwargs):
        raise TimeoutError("timed out")

    monkeypatch.setattr(fleet_mod.socket, "create_connection", cut)
    row = fleet_mod._not_answering(node, "no answer within 3 s")
    assert row == {"health": fleet_mod.UNREACHABLE, "reason": (
        f"its worker does not answer and its node 127.0.0.1:{port} is unreachable: no answer "
        "to a connection within 2 s")}

    def no_route(*_args, **_kwargs):
        raise OSError(errno.EHOSTUNREACH, "No route to host")

    monkeypatch.setattr(fleet_mod.socket, "create_connection", no_route)
    assert fleet_mod.probe_node("10.0.0.9", 1) == "is unreachable: no route to host"


def test_a_ray_head_answers_the_http2_greeting_a_web_server_or_a_silent_port_does_not(fleet):
    import socket
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from specfleet.cluster.reach import speaks_http2

    assert speaks_http2(fleet.address) is True  # a real GCS: its SETTINGS frame at once
    web = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        try:
            assert speaks_http2(f"127.0.0.1:{web.server_address[1]}") is False
            # Says nothing: left to Ray's own client (a slow head may still be one).
            assert speaks_http2(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5) is None
        finally:
            web.shutdown()
            web.server_close()



def test_a_ray_folder_made_in_tmp_is_removed_at_exit_when_ray_left_nothing(tmp_path) -> None:
    # A runtime dir too long for Ray's sockets gets a folder in /tmp; one per command piled up.
    def ray_dir_of_a_process(then: str = "") -> str:
        code = ("from specfleet.cluster.fleet import _private_ray_dir\n"
                f"made = _private_ray_dir({str(tmp_path / ('x' * 60))!r})\n{then}print(made)\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=True).stdout.strip()

    made = ray_dir_of_a_process()
    assert made.startswith("/tmp/sf-ray-") and not os.path.exists(made)
    logged = ray_dir_of_a_process("open(made + '/ray.log', 'w').close()\n")
    try:
        assert os.listdir(logged) == ["ray.log"]  # what Ray left (its logs) is kept
    finally:
        shutil.rmtree(logged, ignore_errors=True)
