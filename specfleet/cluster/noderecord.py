"""This machine's own fleet node: what `fleet up` / `fleet join` started, kept until `leave`.

The record (`SPECFLEET_HOME/fleet-node.json`) holds the head address (the fleet every command
follows by default), this host's name and how it joined (to rejoin the same way), its Ray temp
dir and the processes `ray start` left running. `fleet leave` stops exactly those processes
(and their children), never another Ray cluster or session of the same user.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import psutil

from specfleet.errors import UserError

RECORD_NAME = "fleet-node.json"
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class NodeRecord:
    """How this machine's node was started.

    Attributes:
        address: the head's GCS address HOST:PORT.
        host: this host's fleet name (label `specfleet.host`).
        head: True when `fleet up` started the head here.
        temp_dir: the node's own Ray temp dir (every process of the node names it).
        pids: [pid, create_time] of the node's processes right after `ray start`.
        join_args: what `join` needs to start the same node again (num_cpus, node_ip,
            engines, port).
        supervisor_pid: the supervisor watching this node, if any.
        ports: the port of each of the node's fixed-port parts (`raystart.choose_ports`:
            the dashboard's, moved from Ray's 8265 where it is taken here, ...).
    """

    address: str
    host: str
    head: bool
    temp_dir: str
    pids: list[list[float]] = field(default_factory=list)
    join_args: dict = field(default_factory=dict)
    supervisor_pid: int | None = None
    ports: dict[str, int] = field(default_factory=dict)


def record_path() -> Path:
    from specfleet.dirs import specfleet_home

    return specfleet_home() / RECORD_NAME


def check_writable() -> None:
    """Refuse a `SPECFLEET_HOME` the record cannot be written in, before a node starts: the
    node ran on with no record for `leave` to find, and the command ended in a traceback."""
    from specfleet.dirs import specfleet_home
    from specfleet.settings import HOME
    from specfleet.userfiles import check_writable_dir

    home = specfleet_home()
    check_writable_dir(home, f"${HOME.name} {home}" if HOME.read() else f"the folder {home}")


def default_temp_dir(host: str) -> Path:
    """A Ray temp dir of this host's own (short: Ray's socket paths must stay < 108 bytes)."""
    return Path(tempfile.gettempdir()) / f"ray-specfleet-{host}"


def save(record: NodeRecord) -> None:
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1) + "\n")
    tmp.replace(path)  # never a half-written record


# Each field's type as JSON holds it; a field without a default must be there: a record
# lacking one names no node to find.
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "address": str, "host": str, "head": bool, "temp_dir": str, "pids": list,
    "join_args": dict, "supervisor_pid": (int, type(None)), "ports": dict}
_REQUIRED = tuple(f.name for f in fields(NodeRecord)
                  if f.default is MISSING and f.default_factory is MISSING)


def load() -> NodeRecord | None:
    """The record, or None when this machine has not joined (no record file).

    Raises:
        UserError: the file is there but unreadable (empty, cut short, not a record): never
            read as "not joined", as it may name a node that still runs.
    """
    path = record_path()
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO there blocked every command
            raise _unreadable(path, "not a regular file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):  # a file on its way ($HOME one): none
        return None
    except OSError as err:
        raise _unreadable(path, err.strerror or type(err).__name__) from None
    except ValueError as err:  # UnicodeDecodeError is one too
        raise _unreadable(path, "empty" if not path.stat().st_size else
                          f"not JSON: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise _unreadable(path, "not a node record: not a JSON object")
    wrong = [name for name, kind in _FIELD_TYPES.items()
             if (name in data or name in _REQUIRED) and not isinstance(data.get(name), kind)]
    unknown = sorted(set(data) - set(_FIELD_TYPES))
    if wrong or unknown:
        what = (f"missing or wrong: {', '.join(wrong)}" if wrong
                else f"unknown fields: {', '.join(unknown)}")
        raise _unreadable(path, f"not a node record, {what}")
    return NodeRecord(**data)


def _unreadable(path: Path, why: str) -> UserError:
    return UserError(
        f"this machine's fleet node record {path} is unreadable ({why}); expected what "
        "`specfleet fleet up` / `fleet join` write: if no node of this machine runs (`ps` "
        "shows no raylet naming its temp dir), delete the file, else stop that node's Ray "
        "processes, then delete it")


def forget() -> None:
    record_path().unlink(missing_ok=True)


def joined_fleet() -> str | None:
    """The head this machine joined with `fleet up` / `fleet join`, if it has not left."""
    record = load()
    return record.address if record else None


def node_processes(temp_dir: str) -> list[psutil.Process]:
    """Processes whose command line names `temp_dir` (or a path inside it): the Ray node
    started with it. A longer name is another folder: `/tmp/ray-specfleet-h1` is no part of
    `/tmp/ray-specfleet-h10` (as a plain substring, `leave` on h1 stopped h10's node)."""
    names = re.compile(rf"(?:^|[=\s'\"]){re.escape(temp_dir.rstrip('/'))}(?:$|[/\s'\",])")
    # This command and whatever started it (`fleet up --temp-dir X`, a script around it)
    # name the folder too, and are no part of the node.
    asking = {os.getpid(), *(proc.pid for proc in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.pid not in asking and any(names.search(arg) for arg in cmdline):
            found.append(proc)
    return found


def node_alive(record: NodeRecord) -> bool:
    """Whether this host's raylet (the node) still runs. A node the head declared dead after a
    network cut exits by itself once it reaches the head again; then it counts as lost."""
    for proc in node_processes(record.temp_dir):
        try:
            if proc.name() == "raylet":
                return True
        except Exception:  # noqa: BLE001 - a process that vanished is not our raylet
            continue
    return False


def client_servers(head_address: str) -> list[psutil.Process]:
    """The Ray Client server `ray start --head` started for this head: its command line
    names the head's address but not the temp dir, and it outlives the `ray start` that
    made it, so neither the snapshot nor the children find it."""
    # By the GCS port: Ray gives it the node's own IP, which may not be the recorded one.
    port = head_address.rpartition(":")[2]
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "ray.util.client.server" in cmdline and any(
                arg.startswith("--address=") and arg.endswith(f":{port}") for arg in cmdline):
            found.append(proc)
    return found


def snapshot(temp_dir: str) -> list[list[float]]:
    """[pid, create_time] of the node's processes now."""
    out = []
    for proc in node_processes(temp_dir):
        try:
            out.append([proc.pid, proc.create_time()])
        except psutil.Error:
            continue
    return out


def own_processes(record: NodeRecord) -> list[psutil.Process]:
    """The recorded processes still alive (same pid AND start time), those naming the node's
    temp dir, a head's Ray Client server, and every child of any."""
    procs: dict[int, psutil.Process] = {}
    for pid, created in record.pids:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - created) < 1e-3:
                procs[proc.pid] = proc
        except psutil.Error:
            continue
    for proc in node_processes(record.temp_dir):
        procs.setdefault(proc.pid, proc)
    for proc in client_servers(record.address) if record.head else []:
        procs.setdefault(proc.pid, proc)
    for proc in list(procs.values()):
        try:
            for child in proc.children(recursive=True):
                procs.setdefault(child.pid, child)
        except psutil.Error:
            continue
    procs.pop(os.getpid(), None)
    return list(procs.values())


def stop_processes(procs: list[psutil.Process], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM, wait up to `grace_s`, then SIGKILL what is left; a Ray GCS server only after
    the rest (a raylet stopped while its GCS goes too waits ~10 s for it). Returns how many
    were asked to stop."""
    gcs = [proc for proc in procs if _name(proc) == "gcs_server"]
    for group in ([proc for proc in procs if proc not in gcs], gcs):
        for proc in group:
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error:
                continue
        alive = _wait_gone(group, grace_s)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                continue
        _wait_gone(alive, grace_s)
    return len(procs)


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The processes still running after up to `timeout_s`. An exited process whose parent has
    not reaped it (a zombie) counts as gone: `psutil.wait_procs` would wait out the timeout on
    it, and Ray's dashboard leaves such children when it is stopped."""
    deadline = time.monotonic() + timeout_s
    alive = _running(procs)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = _running(alive)
    psutil.wait_procs(procs, timeout=0)  # reap those that are this process's own children
    return alive


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    running = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.Error:
            continue
    return running


def stop_supervisor(record: NodeRecord) -> None:
    """Stop the record's supervisor first, so it does not start the node again."""
    if not record.supervisor_pid or record.supervisor_pid == os.getpid():
        return
    try:
        proc = psutil.Process(record.supervisor_pid)
        # A recycled pid is left alone: only a background (`-m specfleet.cluster.supervisor`)
        # or foreground (`fleet join --supervise`) supervisor is stopped.
        args = proc.cmdline()
        if "specfleet.cluster.supervisor" in args or "--supervise" in args:
            stop_processes([proc], grace_s=5.0)
    except psutil.Error:
        return


STARTING_NAME = "fleet-node.starting"


@dataclass(frozen=True)
class Starting:
    """A `fleet up` / `fleet join` on this machine still starting its node: from before `ray
    start` until the command ends (its node record is written only once `ray start` is done).

    Attributes:
        command: `fleet up` or `fleet join`.
        host: the host's fleet name.
        pid: the command's process.
        created: that process's start time (a recycled pid is another process).
        since: when the command began (seconds since the epoch).
    """

    command: str
    host: str
    pid: int
    created: float
    since: float

    def what(self) -> str:
        """`specfleet fleet up` (host h1, pid 4242) is starting this machine's node since ..."""
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        ago = max(0, round(time.time() - self.since))
        return (f"`specfleet {self.command}` (host {self.host}, pid {self.pid}) is starting "
                f"this machine's node since {when} ({ago} s ago)")


def starting_path() -> Path:
    return record_path().with_name(STARTING_NAME)


@contextlib.contextmanager
def starting(command: str, host: str) -> Iterator[None]:
    """Mark this process as starting this machine's node while the block runs (`Starting`).

    Raises:
        UserError: `SPECFLEET_HOME` cannot be written (`check_writable`: said before the mark
            is made there, or a traceback), or another live `fleet up` / `fleet join` here is
            starting one.
    """
    check_writable()
    me = psutil.Process()
    mark = Starting(command, host, me.pid, me.create_time(), time.time())
    path = starting_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # a stale mark (its command killed) is replaced once
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            break
        except FileExistsError:
            other = starting_node()
            if other is not None:
                raise UserError(f"{other.what()}; expected it to finish (or Ctrl-C it) "
                                f"before `specfleet {command}`") from None
            path.unlink(missing_ok=True)
    else:
        raise UserError(f"{path}: cannot be replaced; expected to write it")
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(asdict(mark)) + "\n")
    try:
        yield
    finally:
        if starting_node() == mark:  # never another command's mark
            path.unlink(missing_ok=True)


def starting_node() -> Starting | None:
    """The `Starting` mark of a command still running, or None (none, or its command gone:
    killed before it could remove it, a recycled pid, a file that is no mark)."""
    try:
        mark = Starting(**json.loads(starting_path().read_text(encoding="utf-8")))
        proc = psutil.Process(mark.pid)
        alive = abs(proc.create_time() - mark.created) < 1e-3 and \
            proc.status() != psutil.STATUS_ZOMBIE
    except (OSError, ValueError, TypeError, psutil.Error):
        return None
    return mark if alive else None
