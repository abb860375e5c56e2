"""Every `SPECFLEET_*` environment variable: its name, what it means, its default, its reader.

Code reads a variable through its declaration here (`LEASE_S.read()`) and names it by
`.name` (in a message, or in the environment it gives a child process); the table in
docs/architecture.md is checked against `VARIABLES` by tests/test_settings.py. A reader
takes the environment to read (default `os.environ`) and raises one `UserError` line
naming the variable and what is expected when a value is malformed. An empty value reads
as unset, except where `Presence` says otherwise. Defaults that need more than the standard
library are applied by the caller when a reader returns None; the platform's user dirs
(and `SPECFLEET_HOME`, the runtime dir) are computed in `specfleet/dirs.py`.
This module imports only the standard library and `specfleet.errors`: every layer reads it.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specfleet.errors import UserError, is_utf8, whole_number

Environ = Mapping[str, str]


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, what it means and what applies when it is unset."""

    name: str
    meaning: str  # one line
    default: str  # what applies when it is unset, in words

    def value(self, env: Environ | None = None) -> str | None:
        """The value as set, None when unset or empty.

        Raises:
            UserError: the value holds bytes that are not UTF-8.
        """
        raw = (os.environ if env is None else env).get(self.name) or None
        if raw is not None and not is_utf8(raw):
            raise UserError(f"{self.name}: {raw!r} is not UTF-8 text; expected UTF-8")
        return raw


@dataclass(frozen=True)
class Text(Variable):
    """Text checked where it is used (a URL, an address, a file to append to)."""

    def read(self, env: Environ | None = None) -> str | None:
        return self.value(env)


def expand_user(text: str, label: str) -> Path:
    """`Path(text)` with a leading `~` or `~USER` expanded.

    Raises:
        UserError: naming `label`, where that home folder is unknown (`Path.expanduser`
            raises a RuntimeError: a traceback).
    """
    try:
        return Path(text).expanduser()
    except RuntimeError:
        head = text.split("/", 1)[0]
        raise UserError(f"{label} {text!r}: no home folder for {head}; expected ~ or ~USER "
                        "of a known user, or a path without it") from None


def path_value(variable: Variable, env: Environ | None) -> str | None:
    """`variable`'s value as a path, None when unset or empty.

    Raises:
        UserError: blank, or starting or ending with whitespace (a folder named ' ' made in
            the current folder, a paste's trailing space made a second folder).
    """
    raw = variable.value(env)
    if raw is None or raw == raw.strip():
        return raw
    problem = "is blank" if not raw.strip() else "starts or ends with whitespace"
    raise UserError(f"{variable.name}: {raw!r} {problem}; expected a path, or {variable.name} "
                    f"unset for {variable.default}")


@dataclass(frozen=True)
class UserPath(Variable):
    """A file or folder path; `~` is expanded. With `anchored`, a relative one is refused:
    read from the current folder, another folder's command would look elsewhere."""

    anchored: bool = False

    def read(self, env: Environ | None = None) -> Path | None:
        raw = path_value(self, env)
        path = expand_user(raw, self.name) if raw else None
        if path is not None and self.anchored and not path.is_absolute():
            raise UserError(f"{self.name}: {raw!r} is a relative path, so a command run from "
                            "another folder would not find what it holds; expected a path "
                            "starting with / or ~")
        return path


@dataclass(frozen=True)
class AbsolutePath(Variable):
    """A path from `/`, the same whatever the current folder (no `~`: not expanded)."""

    def read(self, env: Environ | None = None) -> str | None:
        raw = path_value(self, env)
        if raw is not None and not raw.startswith("/"):
            raise UserError(f"{self.name}: {raw!r} is not an absolute path; expected a path "
                            "starting with /")
        return raw


@dataclass(frozen=True)
class Seconds(Variable):
    """A number of seconds within `low_s`..`high_s`; `default_s` when unset (its `default`
    text is said from these numbers)."""

    default: str = field(init=False)
    default_s: float
    low_s: float
    high_s: float

    def __post_init__(self) -> None:
        said = f"{self.default_s:g} s ({self.low_s:g}-{self.high_s:g} s)"
        object.__setattr__(self, "default", said)

    def read(self, env: Environ | None = None) -> float:
        """The seconds, or `default_s`.

        Raises:
            UserError: not a number in range.
        """
        raw = self.value(env)
        if raw is None:
            return self.default_s
        try:  # float() also reads '٣', '６' and '1_0', which no other number here takes
            value = float(raw) if raw.isascii() and "_" not in raw else float("nan")
        except ValueError:
            value = float("nan")
        if not self.low_s <= value <= self.high_s:  # also refuses nan
            raise UserError(f"{self.name}: expected seconds between {self.low_s:g} and "
                            f"{self.high_s:g}, got {raw!r}")
        return value


@dataclass(frozen=True)
class Count(Variable):
    """A whole number within `low`..`high`; None when unset (the `default` text says what
    applies then)."""

    low: int
    high: int

    def read(self, env: Environ | None = None) -> int | None:
        """The number, or None.

        Raises:
            UserError: not a whole number in range.
        """
        raw = self.value(env)
        if raw is None:
            return None
        number = whole_number(raw.strip(), self.high)
        if number is None or not self.low <= number <= self.high:
            raise UserError(f"{self.name}: expected a whole number between {self.low} and "
                            f"{self.high}, got {raw!r}")
        return number


def logical_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity call
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Threads(Count):
    """A count of compute threads, also at most `per_cpu` per logical CPU of the machine that
    reads it: past that they only oversubscribe its cores (8 tokens of the bundled model took
    6 s at 2 threads on 2 CPUs, 95 s at 256 and over 120 s at 4096)."""

    per_cpu: int = 8

    def read(self, env: Environ | None = None) -> int | None:
        """The number, or None.

        Raises:
            UserError: not a whole number in range, or more than `per_cpu` per logical CPU.
        """
        number = super().read(env)
        cpus = logical_cpus()
        if number is not None and number > self.per_cpu * cpus:
            raise UserError(f"{self.name}: {number} threads on a machine of {cpus} logical "
                            f"CPUs; expected at most {self.per_cpu * cpus} ({self.per_cpu} a "
                            "CPU: more only oversubscribe its cores)")
        return number


# What turns a switch off, in any case and spaces aside: `=false` reading as on would do the
# opposite of what it says.
OFF_VALUES = ("0", "false", "no", "off")


def _says_off(value: str) -> bool:
    return value.strip().lower() in OFF_VALUES


@dataclass(frozen=True)
class Switch(Variable):
    """On unless set to one of `OFF_VALUES` (as a `Presence`). Any other value is only
    compared, never used, so bytes that are not UTF-8 read as on: `SPECFLEET_OPENBLAS` is read
    as specfleet is imported, where a `UserError` would be a traceback."""

    def read(self, env: Environ | None = None) -> bool:
        return not _says_off((os.environ if env is None else env).get(self.name, ""))


@dataclass(frozen=True)
class Presence(Variable):
    """On when set, even to an empty value, unless set to one of `OFF_VALUES` (which read as
    off, as a `Switch`'s do: `=0` turning it on would do the opposite of what it says)."""

    def read(self, env: Environ | None = None) -> bool:
        environ = os.environ if env is None else env
        return self.name in environ and not _says_off(environ[self.name])


# Ray's rule for a label value: `$` would also pass a trailing newline, which Ray refuses.
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
HOST_NAME_EXPECTED = ("a host name of letters, digits, '_', '.' or '-', starting and ending "
                      "with a letter or digit (at most 63)")


def host_name_problem(text: str) -> str | None:
    """Why `text` cannot name a fleet host (a Ray label value and a store key), or None."""
    if _HOST_NAME.fullmatch(text):
        return None
    return f"expected {HOST_NAME_EXPECTED}, got {text[:80]!r}"


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, no port) names this machine's loopback:
    `localhost` in any case, 127.0.0.0/8 (the shorthands the socket layer binds too: 127.1)
    or ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.inet_aton(host)).is_loopback
    except (OSError, ValueError):  # ValueError: a NUL in it
        return False


@dataclass(frozen=True)
class HostName(Variable):
    """A fleet host name: a Ray label value and a store key."""

    def read(self, env: Environ | None = None) -> str | None:
        """The name, None when unset.

        Raises:
            UserError: not letters, digits, '_', '.' or '-', starting and ending with a
                letter or digit (at most 63).
        """
        given = self.value(env)
        if given is not None and (problem := host_name_problem(given)):
            raise UserError(f"{self.name}: {problem}")
        return given


ADDRESS = Text(
    "SPECFLEET_ADDRESS", "the fleet head (HOST:PORT) a command follows when no --address is given",
    "$RAY_ADDRESS, else the fleet this machine joined, else an embedded fleet")
CONDITIONS_ROOT = AbsolutePath(  # a worker reads it in its own folder, not this shell's
    "SPECFLEET_CONDITIONS_ROOT",
    "a tree laid out like / that a worker's Linux conditions sources read (a simulated host)",
    "/")
DB = Text(
    "SPECFLEET_DB", "the store (a SQLAlchemy URL or a SQLite file path) when no --db is given",
    "specfleet.db in the user data dir")
FORCE_SYNC = Presence(
    "SPECFLEET_FORCE_SYNC",
    "set, even empty, but not to 0, false, no or off: the decode loop never pipelines",
    "pipelining where the sampler allows it and the device's steps overlap the host "
    "(not torch on a CPU)")
HOME = UserPath(
    "SPECFLEET_HOME",
    "the folder of converted bundled models, the fleet node record and the supervisor log",
    "the user cache dir", anchored=True)
HOST = HostName(
    "SPECFLEET_HOST", "this host's name in the fleet (a Ray label value and a store key)",
    "the short host name, lower case")
JOURNAL_DIR = UserPath(
    "SPECFLEET_JOURNAL_DIR", "where a driver keeps finished results until the store has them",
    "journal/ in the user data dir", anchored=True)
LEASE_S = Seconds(
    "SPECFLEET_LEASE_S", "a driver's heartbeat lease on its matrix and runs, in seconds",
    default_s=60.0, low_s=1.0, high_s=3600.0)
MODELS = UserPath(  # a fleet worker reads it from its own folder, not this shell's
    "SPECFLEET_MODELS", "the model alias file (a models.yaml)",
    "the packaged specfleet/configs/models.yaml", anchored=True)
OPENBLAS = Switch(
    "SPECFLEET_OPENBLAS",
    "0 (or false, no, off): MLX's CPU backend keeps the wheel's own BLAS (no OpenBLAS loaded)",
    "OpenBLAS loaded on Linux x86-64 where it is installed")
RUNTIME_DIR = AbsolutePath(  # every process of the user must find the same machine lock
    "SPECFLEET_RUNTIME_DIR",
    "this user's private runtime folder (machine locks, kept results, the embedded Ray dir)",
    "/tmp/specfleet-UID")
SELFTEST = Switch(
    "SPECFLEET_SELFTEST",
    "0 (or false, no, off): workers start without their self-test (test suites, debugging)",
    "the self-test runs")
STORE_RETRY_S = Seconds(
    "SPECFLEET_STORE_RETRY_S", "how long a store write retries an unreachable store, in seconds",
    default_s=300.0, low_s=1.0, high_s=86400.0)
THREADS = Threads(
    "SPECFLEET_THREADS", "CPU threads a worker's engine computes with (torch, OpenBLAS under MLX); "
    "`generate` and `calibrate` too, when set",
    "one per physical core but one (left to Ray and the driver), at most the CPUs its "
    "affinity (taskset) allows", low=1, high=4096)
TOY_RUN_LOG = AbsolutePath(  # appended to by a worker, in its own folder
    "SPECFLEET_TOY_RUN_LOG", "a file each finished toy run appends its run key to (fault tests)",
    "no log")



def check_worker_settings() -> None:
    """Read what a fleet worker started here inherits and reads only once it runs, so a bad
    value is one line before the node starts, not a traceback in every run after.

    Raises:
        UserError: a malformed `SPECFLEET_THREADS`, a `SPECFLEET_CONDITIONS_ROOT` that is
            no folder (its readings would all be missing, without a word), or a
            `SPECFLEET_TOY_RUN_LOG` no file can be appended at (every toy run would fail).
    """
    THREADS.read()
    root = CONDITIONS_ROOT.read()
    # An empty folder read as a host whose every reading is missing, its runs stored as quiet.
    if root is not None and not any(os.path.isdir(os.path.join(root, top))
                                    for top in ("proc", "sys")):
        problem = "holds neither proc/ nor sys/" if os.path.isdir(root) else "is no folder"
        raise UserError(f"{CONDITIONS_ROOT.name}: {root} {problem}; expected a tree laid out "
                        f"like / (sys/..., proc/meminfo), or {CONDITIONS_ROOT.name} unset for /")
    log = TOY_RUN_LOG.read()
    if log is not None and (os.path.exists(log) and not os.path.isfile(log)
                            or not os.path.isdir(os.path.dirname(log))
                            or not os.access(log if os.path.exists(log) else
                                             os.path.dirname(log), os.W_OK)):
        # A named pipe held every run until the timeout; a device (/dev/full) failed each,
        # as a read-only mount did.
        problem = ("is a folder" if os.path.isdir(log) else
                   "is no regular file (a named pipe or a device)" if os.path.exists(log)
                   and not os.path.isfile(log) else
                   "is in no folder that exists" if not os.path.isdir(os.path.dirname(log)) else
                   "cannot be written (a read-only file system?)")
        raise UserError(f"{TOY_RUN_LOG.name}: {log} {problem}; expected a file to append run "
                        f"keys to in an existing folder, or {TOY_RUN_LOG.name} unset")


VARIABLES: tuple[Variable, ...] = (
    ADDRESS, CONDITIONS_ROOT, DB, FORCE_SYNC, HOME, HOST, JOURNAL_DIR, LEASE_S, MODELS,
    OPENBLAS, RUNTIME_DIR, SELFTEST, STORE_RETRY_S, THREADS, TOY_RUN_LOG,
)


def names_a_setting(message: str) -> bool:
    """Whether `message` starts with a setting's name (`SPECFLEET_HOME: ...`): a mistake in
    the environment, not in the flag or field it was met under."""
    return any(message.startswith((f"{v.name}:", f"{v.name} ")) for v in VARIABLES)
