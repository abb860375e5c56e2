"""The bad-input corpus: every case is one stderr line, a non-zero exit, no traceback, and
the store (and every file around it) byte-identical afterwards.

Cases cover matrix files, flags, environment variables, database URLs, paths and files of
the wrong kind; each fails at the edge, before a fleet starts or a model loads (`NAMED` cases
also say what the line must name: the flag, variable or file, and what is expected). A Hypothesis
test feeds random YAML structures to `matrix validate` and never sees a traceback.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from specfleet.userfiles import MAX_TEXT_BYTES
from specfleet.workers.hardware import default_host_name
from tests.store.factory import grid
from tests.weights import EMPTY_SAFETENSORS

GOOD = """\
name: good
models: ["script:1ms"]
prompts: [{name: p, text: "hello hello"}]
arms: [plain, graded]
targets: {engines: [toy]}
"""


def matrix(**fields: str) -> str:
    """GOOD with some top-level fields replaced (values are YAML text)."""
    data = yaml.safe_load(GOOD)
    lines = [f"{key}: {value}" for key, value in fields.items()]
    kept = [f"{key}: {flow(value)}" for key, value in data.items() if key not in fields]
    return "\n".join(kept + lines) + "\n"


def flow(value) -> str:
    """`value` as one line of YAML; a lone scalar dumps with the document end marker `...`,
    which would end the document there."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("...\n").strip()


def deep(levels: int) -> str:
    return "name: deep\nmodels: " + "[" * levels + "x" + "]" * levels + "\n"


FILES: dict[str, str | bytes] = {
    "name of 300 characters": matrix(name="n" * 300),
    "model of 300 characters": matrix(models=f"['{'m' * 300}']"),
    "prompt name of 200 characters": matrix(prompts=f"[{{name: {'p' * 200}, text: hi}}]"),
    "seed 10^23": matrix(seed="100000000000000000000000"),
    "seed 2^31": matrix(seed="2147483648"),
    "seed of 5000 digits": matrix(seed="9" * 5000),  # int() refuses past 4300: a traceback
    "seed -1": matrix(seed="-1"),
    "seed as text": matrix(seed="'7'"),
    # It ran greedy where the seed said sampling was meant; `generate --seed` refuses it.
    "seed with greedy decoding": matrix(seed="5"),
    "NUL in prompt text": matrix(prompts='[{name: p, text: "a\\0b"}]'),
    "NUL in a model name": matrix(models='["m\\0"]'),
    "NUL in prompt_suffix": matrix(prompt_suffix='{"script:1ms": "x\\0"}'),
    "temperature nan": matrix(temperature=".nan"),
    "temperature inf": matrix(temperature=".inf"),
    "temperature -1": matrix(temperature="-1.0"),
    "temperature 11": matrix(temperature="11.0"),
    "max_tokens 10^9": matrix(max_tokens="1000000000"),
    "max_tokens 0": matrix(max_tokens="0"),
    "max_tokens per engine 0": matrix(max_tokens="{torch: 0}"),
    "max_tokens as text": matrix(max_tokens="'many'"),
    "repeats 1000": matrix(repeats="1000"),
    "repeats 0": matrix(repeats="0"),
    "repeats float": matrix(repeats="2.5"),
    "repeats bool": matrix(repeats="true"),
    "name with spaces": matrix(name="'two words'"),
    "name starting with a dot": matrix(name="'.hidden'"),
    "empty file": "",
    "only a comment": "# nothing\n",
    "a list at the top": "- a\n- b\n",
    "a scalar at the top": "hello\n",
    "yaml syntax": "name: [unclosed\n",
    "tab indentation": "name: m\nmodels:\n\t- x\n",
    "duplicate key": GOOD + "name: again\n",
    "unknown field": GOOD + "colour: red\n",
    "misspelt field": GOOD.replace("arms:", "armz:"),
    "no models": matrix(models="[]"),
    "models not a list": matrix(models="script"),
    "blank model": matrix(models="['  ']"),
    "duplicate model": matrix(models="[a, a]"),
    "no prompts": matrix(prompts="[]"),
    "duplicate prompt": matrix(prompts="[{name: p, text: a}, {name: p, text: b}]"),
    "empty prompt text": matrix(prompts="[{name: p, text: '  '}]"),
    "missing prompt file": matrix(prompts="[nosuchprompt]"),
    "prompt entry a number": matrix(prompts="[3]"),
    "unknown arm": matrix(arms="[turbo]"),
    "duplicate arm": matrix(arms="[plain, plain]"),
    "no plain arm": matrix(arms="[graded]"),
    "plain with options": matrix(arms="[{arm: plain, max_draft: 3}]"),
    "ngram_min 0": matrix(arms="[plain, {arm: graded, ngram_min: 0}]"),
    "max_draft 1000": matrix(arms="[plain, {arm: graded, max_draft: 1000}]"),
    "unknown engine": matrix(targets="{engines: [cuda]}"),
    "unknown device": matrix(targets="{devices: [tpu]}"),
    # Each validated "ok": a kind no host could have matched no target.
    "blank host kind": matrix(targets="{engines: [toy], kinds: ['']}"),
    "host kind with a space": matrix(targets="{engines: [toy], kinds: ['linux cpu']}"),
    # It validated "ok" and planned no run of the prompt.
    "a prompt whose targets share no engine with the matrix's": matrix(
        prompts="[{name: p, text: hi, targets: {engines: [torch]}}]"),
    # Each validated "ok" and ran as if listed once.
    "duplicate engine": matrix(targets="{engines: [toy, toy]}"),
    "duplicate host kind": matrix(targets="{engines: [toy], kinds: [linux-cpu, linux-cpu]}"),
    "duplicate host": matrix(targets="{engines: [toy], hosts: [a, b, a]}"),
    "duplicate device": matrix(targets="{engines: [toy], devices: [cpu, cpu]}"),
    "duplicate engine in a prompt's targets": matrix(
        prompts="[{name: p, text: hi, targets: {engines: [toy, toy]}}]"),
    "bad loop guard": matrix(loop_guard="'1,2'"),
    "loop guard max < min": matrix(loop_guard="'8,2,4'"),
    "loop guard period 10^20": matrix(loop_guard="'1,99999999999999999999,3'"),
    "loop guard in non-ASCII digits": matrix(loop_guard="'1,²,3'"),
    "loop guard period of 5000 digits": matrix(loop_guard=f"'1,{'9' * 5000},3'"),
    "toy model sleeping 10^20 ms": matrix(models="['script:99999999999999999999ms']"),
    "prompt_suffix for an unknown model": matrix(prompt_suffix="{other: x}"),
    "prompt_dir missing": matrix(prompts="[story]", prompt_dir="nowhere"),
    "integer keys": "1: 2\n" + GOOD,
    # Unhashable: a TypeError traceback in every YAML reader.
    "a list as a key": "? [a]\n: 1\n" + GOOD,
    "a set as a key in a model entry": matrix(models="[{? !!set {a} : 1}]"),
    "nested 20000 deep": deep(20000),
    "nested 40 deep": deep(40),
    "alias bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                  "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                  "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
    "python tag": "!!python/object/apply:os.system ['true']\n",
    "binary matrix file": b"\x00\x01\x02\xff\xfe" * 20,
    "latin-1 matrix file": "name: caf\xe9\n".encode("latin-1"),
}


def bad_prompt_file(content: bytes):
    def make(tmp: Path) -> list[str]:
        prompts = tmp / "prompts"
        prompts.mkdir(exist_ok=True)
        (prompts / "bin.txt").write_bytes(content)
        (tmp / "m").mkdir(exist_ok=True)
        (tmp / "m" / "x.yaml").write_text(matrix(prompts="[bin]"))
        return ["matrix", "validate", str(tmp / "m" / "x.yaml")]
    return make


def cmd(*args: str):
    return lambda tmp: [a.replace("{tmp}", str(tmp)) for a in args]


CALLS = {
    "binary prompt file": bad_prompt_file(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"),
    "NUL in a prompt file": bad_prompt_file(b"hello\x00world"),
    "empty prompt file": bad_prompt_file(b"\n\n"),
    "matrix file is a directory": cmd("matrix", "validate", "{tmp}"),
    "matrix file missing": cmd("matrix", "validate", "{tmp}/nope.yaml"),
    "run: matrix file missing": cmd("matrix", "run", "{tmp}/nope.yaml", "--db", "{db}"),
    "run: report dir under a file": cmd("matrix", "run", "{tmp}/good.yaml", "--db", "{db}",
                                        "--report-dir", "{tmp}/afile/reports"),
    "report --out under a file": cmd("report", "{mid}", "--db", "{db}", "--out",
                                     "{tmp}/afile/out"),
    "report --out is a file": cmd("report", "{mid}", "--db", "{db}", "--out", "{tmp}/afile"),
    "report unknown matrix": cmd("report", "nope-000000", "--db", "{db}"),
    "list --limit 0": cmd("matrix", "list", "--limit", "0", "--db", "{db}"),
    "list --limit -1": cmd("matrix", "list", "--limit", "-1", "--db", "{db}"),
    "list --limit text": cmd("matrix", "list", "--limit", "ten", "--db", "{db}"),
    "show unknown id": cmd("matrix", "show", "nope-000000", "--db", "{db}"),
    "show bad format": cmd("matrix", "show", "{mid}", "--format", "html", "--db", "{db}"),
    "status unknown id": cmd("matrix", "status", "nope-000000", "--db", "{db}"),
    "resume unknown id": cmd("matrix", "resume", "nope-000000", "--db", "{db}"),
    # It waited forever for a host that went away.
    "resume --wait past a week": cmd("matrix", "resume", "{mid}", "--db", "{db}",
                                     "--wait", "9" * 400 + "h"),
    "resume --wait in non-ASCII digits": cmd("matrix", "resume", "{mid}", "--db", "{db}",
                                             "--wait", "١٠m"),
    # A mistyped --db made a new empty store, then said "no matrix".
    "resume in a store that does not exist": cmd("matrix", "resume", "nope-000000", "--db",
                                                 "{tmp}/typo.db"),
    "unknown option": cmd("matrix", "list", "--bogus", "--db", "{db}"),
    "unknown command": cmd("matrix", "explode"),
    "results bad since": cmd("results", "--since", "yesterday", "--db", "{db}"),
    "results bad arm": cmd("results", "--arm", "fast", "--db", "{db}"),
    "results bad format": cmd("results", "--format", "xml", "--db", "{db}"),
    "compare unknown": cmd("compare", "{mid}", "nope-000000", "--db", "{db}"),
    "parity unknown": cmd("parity", "nope-000000", "--db", "{db}"),
    "parity near-tie nan": cmd("parity", "{mid}", "--near-tie", "nan", "--db", "{db}"),
    "parity near-tie -1": cmd("parity", "{mid}", "--near-tie", "-1", "--db", "{db}"),
    "generate temp nan": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--temp", "nan"),
    "generate temp inf": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--temp", "inf"),
    "generate temp -1": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--temp", "-1"),
    "generate temp 100": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--temp", "100"),
    "generate seed -1": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--seed", "-1",
                            "--temp", "0.7"),
    "generate seed 2^31": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--seed",
                              "2147483648", "--temp", "0.7"),
    "generate -n 10^9": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "-n", "1000000000"),
    "generate -n 0": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "-n", "0"),
    "generate NUL prompt": cmd("generate", "-m", "smollm2-135m", "-p", "a\x01b\x00c"),
    "generate empty prompt": cmd("generate", "-m", "smollm2-135m", "-p", "   "),
    "generate binary prompt file": lambda tmp: [
        "generate", "-m", "smollm2-135m", "--prompt-file", str(_binary(tmp))],
    "generate prompt file missing": cmd("generate", "-m", "smollm2-135m", "--prompt-file",
                                        "{tmp}/none.txt"),
    "generate prompt and file": cmd("generate", "-m", "smollm2-135m", "-p", "x",
                                    "--prompt-file", "{tmp}/good.yaml"),
    "generate unknown engine": cmd("generate", "-m", "smollm2-135m", "-p", "hi", "--engine",
                                   "cuda"),
    "generate unknown model": cmd("generate", "-m", "no-such-model", "-p", "hi"),
    "generate max draft 0": cmd("generate", "-m", "smollm2-135m", "-p", "hi",
                                "--prompt-lookup", "--prompt-lookup-max-draft", "0"),
    "generate bad loop guard": cmd("generate", "-m", "smollm2-135m", "-p", "hi",
                                   "--loop-guard", "1,2"),
    "generate loop guard in non-ASCII digits": cmd("generate", "-m", "smollm2-135m", "-p", "hi",
                                                   "--loop-guard", "1,²,3"),
    # int() refuses over 4300 digits: a ValueError traceback.
    "generate loop guard period of 5000 digits": cmd("generate", "-m", "smollm2-135m", "-p",
                                                     "hi", "--loop-guard", f"1,{'9' * 5000},3"),
    "generate loop guard period 10^20": cmd("generate", "-m", "smollm2-135m", "-p", "hi",
                                            "--loop-guard", "1,99999999999999999999,3"),
    "db: unknown scheme": cmd("matrix", "list", "--db", "mysql://u@h/db"),
    "db: sqlite without path": cmd("matrix", "list", "--db", "sqlite://"),
    "db: sqlite memory": cmd("matrix", "list", "--db", "sqlite:///:memory:"),
    "db: unparsable": cmd("matrix", "list", "--db", "%%%://"),
    "db: port 99999": cmd("matrix", "list", "--db", "postgresql://u@127.0.0.1:99999/db"),
    "db: port text": cmd("matrix", "list", "--db", "postgresql://u@127.0.0.1:abc/db"),
    "db: closed port": cmd("matrix", "list", "--db", "postgresql://u@127.0.0.1:1/db"),
    "db: empty host": cmd("matrix", "list", "--db", "postgresql://u@:5432/db"),
    "db: /dev/null": cmd("matrix", "list", "--db", "/dev/null"),
    "db: /dev/null for writing": cmd("db", "upgrade", "--db", "/dev/null"),
    "db: a directory": cmd("matrix", "list", "--db", "{tmp}"),
    "db: missing file": cmd("matrix", "list", "--db", "{tmp}/typo.db"),
    "db: missing directory": cmd("db", "upgrade", "--db", "{tmp}/no/dir/x.db"),
    "db: a text file": cmd("matrix", "list", "--db", "{tmp}/afile"),
    "db: a text file for writing": cmd("db", "upgrade", "--db", "{tmp}/afile"),
    "db: another app's database": cmd("results", "--db", "{tmp}/someapp.sqlite"),
    "db: another app's database for writing": cmd("db", "upgrade", "--db",
                                                  "{tmp}/someapp.sqlite"),
    "db: empty file": cmd("matrix", "list", "--db", "{tmp}/empty.db"),
    "fleet status unreachable": cmd("fleet", "status", "--address", "127.0.0.1:1"),
    "fleet status malformed address": cmd("fleet", "status", "--address", "nonsense"),
    "job generate bad batch": cmd("job", "generate", "--prompts", "{tmp}/afile", "--target",
                                  "h/toy", "--db", "{db}"),
    "job generate missing batch": cmd("job", "generate", "--prompts", "{tmp}/none.jsonl",
                                      "--target", "h/toy", "--db", "{db}"),
    "job calibrate bad engine": cmd("job", "calibrate", "--model", "x", "--engine", "gpu",
                                    "--db", "{db}"),
    # A fleet that is not there leaves no new empty store behind (the snapshot sees one).
    "matrix run, no fleet there, new store": cmd(
        "matrix", "run", "{tmp}/good.yaml", "--address", "127.0.0.1:1", "--db",
        "{tmp}/new-matrix-run.db"),
    "bench, no fleet there, new store": cmd(
        "bench", "-m", "script:1ms", "-p", "story", "-e", "toy", "--address", "127.0.0.1:1",
        "--db", "{tmp}/new-bench.db"),
    "parity run, no fleet there, new store": cmd(
        "parity", "run", "{tmp}/good.yaml", "--address", "127.0.0.1:1", "--db",
        "{tmp}/new-parity-run.db"),
    "job calibrate, no fleet there, new store": cmd(
        "job", "calibrate", "--model", "script:1ms", "--address", "127.0.0.1:1", "--db",
        "{tmp}/new-job-calibrate.db"),
    "job generate, no fleet there, new store": cmd(
        "job", "generate", "--prompts", "{tmp}/batch.jsonl", "--target", "h/toy", "--address",
        "127.0.0.1:1", "--db", "{tmp}/new-job-generate.db"),
}

ENVS = {
    "SPECFLEET_DB unknown scheme": ({"SPECFLEET_DB": "mysql://u@h/db"}, cmd("matrix", "list")),
    "SPECFLEET_DB sqlite://": ({"SPECFLEET_DB": "sqlite://"}, cmd("results")),
    "SPECFLEET_DB /dev/null": ({"SPECFLEET_DB": "/dev/null"}, cmd("matrix", "list")),
    "SPECFLEET_LEASE_S nan": ({"SPECFLEET_LEASE_S": "nan"},
                              cmd("matrix", "run", "{tmp}/good.yaml", "--db", "{db}")),
    "SPECFLEET_LEASE_S 0": ({"SPECFLEET_LEASE_S": "0"},
                            cmd("matrix", "run", "{tmp}/good.yaml", "--db", "{db}")),
    "SPECFLEET_STORE_RETRY_S -5": ({"SPECFLEET_STORE_RETRY_S": "-5"},
                                   cmd("matrix", "run", "{tmp}/good.yaml", "--db", "{db}")),
    # A driver's settings, read before the fleet: `job generate`, `parity run` and `bench`
    # read them only once the embedded fleet was up; `job generate` and `job calibrate`
    # ignored the retry.
    "SPECFLEET_LEASE_S nan, job generate on the embedded fleet": (
        {"SPECFLEET_LEASE_S": "nan", "SPECFLEET_HOST": "badhost"},
        cmd("job", "generate", "--prompts", "{tmp}/batch.jsonl", "--target", "badhost/toy",
            "--model", "script:1ms", "--embedded", "--db", "{tmp}/lease-job.db")),
    "SPECFLEET_STORE_RETRY_S -5, job generate on the embedded fleet": (
        {"SPECFLEET_STORE_RETRY_S": "-5", "SPECFLEET_HOST": "badhost"},
        cmd("job", "generate", "--prompts", "{tmp}/batch.jsonl", "--target", "badhost/toy",
            "--model", "script:1ms", "--embedded", "--db", "{tmp}/retry-job.db")),
    "SPECFLEET_STORE_RETRY_S -5, job calibrate on the embedded fleet": (
        {"SPECFLEET_STORE_RETRY_S": "-5"},
        cmd("job", "calibrate", "--model", "script:1ms", "--engine", "toy", "--embedded",
            "--db", "{tmp}/retry-calibrate.db")),
    "SPECFLEET_LEASE_S nan, bench on the embedded fleet": (
        {"SPECFLEET_LEASE_S": "nan"},
        cmd("bench", "-m", "script:1ms", "-p", "story", "-e", "toy", "--embedded", "--db",
            "{tmp}/lease-bench.db")),
    "SPECFLEET_STORE_RETRY_S -5, parity run on the embedded fleet": (
        {"SPECFLEET_STORE_RETRY_S": "-5"},
        cmd("parity", "run", "{tmp}/good.yaml", "--embedded", "--db", "{tmp}/retry-parity.db")),
    # Read by the embedded fleet's worker: it failed every run after the fleet started.
    "SPECFLEET_THREADS abc, embedded fleet": (
        {"SPECFLEET_THREADS": "abc"},
        cmd("matrix", "run", "{tmp}/good.yaml", "--embedded", "--db", "{tmp}/threads.db")),
    "SPECFLEET_THREADS 0, fleet up": ({"SPECFLEET_THREADS": "0"}, cmd("fleet", "up")),
    # Read by the worker's conditions probe: a traceback in the worker on every run.
    "SPECFLEET_CONDITIONS_ROOT not UTF-8, embedded fleet": (
        {"SPECFLEET_CONDITIONS_ROOT": "/tmp/\udcff"},
        cmd("matrix", "run", "{tmp}/good.yaml", "--embedded", "--db", "{tmp}/conditions.db")),
    "SPECFLEET_MODELS missing": ({"SPECFLEET_MODELS": "/nonexistent/models.yaml"},
                                 cmd("generate", "-m", "smollm2-135m", "-p", "hi")),
    "SPECFLEET_HOST with a space": ({"SPECFLEET_HOST": "my host"},
                                    cmd("parity", "{mid}", "--db", "{db}")),
    "SPECFLEET_HOST with a slash": ({"SPECFLEET_HOST": "a/b"},
                                    cmd("parity", "{mid}", "--db", "{db}")),
    "SPECFLEET_RUNTIME_DIR is a file": ({"SPECFLEET_RUNTIME_DIR": "{tmp}/afile"},
                                       cmd("generate", "-m", "smollm2-135m", "-p", "hi")),
}


def _binary(tmp: Path) -> Path:
    path = tmp / "prompt.bin"
    path.write_bytes(b"\xff\xfe\x00\x81binary")
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store holding one matrix, plus the files the cases point at."""
    tmp = tmp_path_factory.mktemp("bad")
    db = tmp / "store.db"
    with open_store(str(db)) as store:
        matrix_id = store.create_matrix("kept", {}, grid(repeats=1))
        store.finish_matrix(matrix_id, "done")
    (tmp / "good.yaml").write_text(GOOD)
    (tmp / "batch.jsonl").write_text('{"prompt": "hello hello"}\n')
    (tmp / "afile").write_text("not a database, not a folder\n")
    (tmp / "empty.db").touch()
    import sqlite3

    with sqlite3.connect(tmp / "someapp.sqlite") as conn:
        conn.execute("create table users (id integer primary key)")
    return tmp, db, matrix_id


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` by content (SQLite's -wal/-shm side files aside, and the
    weights' hash a model load caches beside them before the library reads the folder)."""
    from specfleet.models.registry import HASH_FILE

    return {str(p.relative_to(root)): _digest(p) for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm")) and p.name != HASH_FILE}


_DIGESTS: dict[tuple, str] = {}  # a file read once while its inode, size and mtime stay


def _digest(path: Path) -> str:
    """A file's sha256, read again only when a write could have changed it (each case
    snapshots the world twice: re-reading every file was a sixth of this module's time)."""
    stat = path.stat()
    key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _DIGESTS[key]


def check_case(world, args: list[str], env: dict[str, str] | None = None,
               every_problem: bool = False):
    """One `error:` line (`matrix validate` may list several problems, one line each)."""
    tmp, db, matrix_id = world
    args = [a.replace("{db}", str(db)).replace("{mid}", matrix_id) for a in args]
    env = {k: v.replace("{tmp}", str(tmp)) for k, v in (env or {}).items()}
    before = snapshot(tmp)
    result = CliRunner().invoke(app, args, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code not in (0, None), (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    assert every_problem or len(lines) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert snapshot(tmp) == before
    return result


@pytest.mark.parametrize("case", sorted(FILES))
def test_bad_matrix_file(world, case) -> None:
    tmp = world[0]
    path = tmp / "cases" / f"{abs(hash(case))}.yaml"
    path.parent.mkdir(exist_ok=True)
    content = FILES[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    check_case(world, ["matrix", "validate", str(path)], every_problem=True)
    check_case(world, ["matrix", "run", str(path), "--db", str(world[1])])


@pytest.mark.parametrize("case", sorted(CALLS))
def test_bad_call(world, case) -> None:
    check_case(world, CALLS[case](world[0]))


@pytest.mark.parametrize("case", sorted(ENVS))
def test_bad_environment(world, case) -> None:
    env, make = ENVS[case]
    check_case(world, make(world[0]), env)


def files(**entries: str):
    """A call's own files: text (mode 0600, as a user keeps a token file), or "fifo" / "dir" /
    "huge" / "loop" / "shared token" for a named pipe, a folder, a (sparse) file past
    `MAX_TEXT_BYTES`, a link to itself or a valid token other users may read, of that name
    (`__` in a keyword stands for a dot); the call's arguments come after."""
    def make(here: Path, args: list[str]) -> list[str]:
        here.mkdir(parents=True)
        for name, content in entries.items():
            path = here / name.replace("__", ".")
            if content == "fifo":
                os.mkfifo(path)
            elif content == "dir":
                path.mkdir()
            elif content == "huge":
                with path.open("wb") as out:
                    out.truncate(MAX_TEXT_BYTES + 1)
            elif content == "loop":
                path.symlink_to(path)
            elif content == "shared token":
                path.write_text("abcdefghijklmnopqrstuvwxyz0123\n")
                path.chmod(0o644)
            else:
                path.write_bytes(content.encode("latin-1"))
                path.chmod(0o600)
        return args
    return make


def ray_record(content: str):
    """`ray_current_cluster` in the case's folder read as Ray's temp dir (`$RAY_TMPDIR`)."""
    def make(here: Path, args: list[str]) -> list[str]:
        (here / "ray").mkdir(parents=True)
        (here / "ray" / "ray_current_cluster").write_text(content)
        return args
    return make


def run_args(matrix_file: str, *more: str) -> list[str]:
    return ["matrix", "run", matrix_file, "--db", "{db}", "--embedded", "--no-progress", *more]


NO_TENSORS = EMPTY_SAFETENSORS.decode("latin-1")  # `files` writes text
NOT_WRITABLE = "/proc/specfleet-x"  # root writes wherever mode bits say no, but not here
STORY_HERE = matrix(prompts="[story]", prompt_dir="'.'")  # prompts read beside the file
STORY_PACKAGED = matrix(prompts="[story]")  # the packaged prompts: no ../prompts in the cases
FLEET_STATUS = ["fleet", "status", "--address", "127.0.0.1:1"]
JOB_BATCH = ["job", "generate", "--prompts", "{here}/b.jsonl", "--target", "h/toy", "--db", "{db}"]
REPORT_HERE = ["report", "{mid}", "--db", "{db}", "--out", "{here}"]
REPLAY_COSTS = ["replay", "{mid}", "--costs", "{here}/c.yaml", "--db", "{db}"]
STORY_DIR = "{here}/story: is a directory; expected a prompt text file"
PIPE = "is a named pipe (FIFO); expected a"
NO_FILES = files()
HERE = default_host_name()  # the embedded fleet's one host
BLANK_MATRIX = "expected a matrix id (`specfleet matrix list`)"
LONG_NAME = "n" * 300
# A tokenizer.json of whole words (`tokenizers` reads it; "hi" is one token).
WORD_TOKENIZER = ('{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [], '
                  '"normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, '
                  '"post_processor": null, "decoder": null, "model": {"type": "WordLevel", '
                  '"vocab": {"hi": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}')
NO_USER = "specfleet-no-such-user"  # ~NO_USER names no home folder  # a file name is at most 255 bytes on Linux and macOS

# case -> (environment, files, arguments, what the one line names); `{here}` is the case's
# own folder. Each is refused with exit status 2, one line, nothing written.
NAMED = {
    "run: report dir cannot be made": (
        {}, NO_FILES, run_args("{tmp}/good.yaml", "--report-dir", NOT_WRITABLE),
        ["--report-dir", f"cannot create {NOT_WRITABLE}", "expected a folder you can write"]),
    "report: --out cannot be made": (
        {}, NO_FILES, ["report", "{mid}", "--db", "{db}", "--out", NOT_WRITABLE],
        ["--out", f"cannot create {NOT_WRITABLE}", "expected a folder you can write"]),
    "db current: malformed host": (
        {}, NO_FILES, ["db", "current", "--db", "postgresql+psycopg://u:s3cret@[zz/x"],
        ["--db: postgresql+psycopg://u:***@", "host '[zz'",
         "expected postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"]),
    # The resolver's IDNA codec raised UnicodeError ("label too long"), and SQLAlchemy an
    # ArgumentError on ports that do not pair with hosts: each a traceback as it connected.
    "results: --db a PostgreSQL host with a label of 64 characters": (
        {}, NO_FILES, ["results", "--db", f"postgresql://u:s3cret@{'h' * 64}:1/db"],
        [f"--db: postgresql://u:***@{'h' * 64}:1/db: host '{'h' * 64}' is neither a host name "
         "nor an IP address"]),
    "matrix list: --db a PostgreSQL ?host= with an empty label": (
        {}, NO_FILES, ["matrix", "list", "--db", "postgresql://u@/db?host=127.0.0.1&host=a..b"],
        ["host 'a..b' is neither a host name nor an IP address"]),
    "job list: --db a PostgreSQL URL with more ports than hosts": (
        {}, NO_FILES, ["job", "list", "--db", "postgresql://u@/db?host=127.0.0.1&port=1&port=2"],
        ["number of hosts and ports don't match; expected postgresql+psycopg://"]),
    "generate: -m hf: with no repo": (  # "'hf:':  is not in the local Hugging Face cache"
        {}, NO_FILES, ["generate", "-m", "hf:", "-p", "hi"],
        ["--model: model 'hf:' is no Hugging Face repo id; expected hf:ORG/NAME"]),
    "generate: -m hf: with an org starting with '-'": (  # its hint said `hf download -org/x`
        {}, NO_FILES, ["generate", "-m", "hf:-org/x", "-p", "hi"],
        ["--model: model 'hf:-org/x' is no Hugging Face repo id; expected hf:ORG/NAME"]),
    "SPECFLEET_MODELS: an hf: source that is a path": (  # its hint said `hf download ../../etc`
        {"SPECFLEET_MODELS": "{here}/models.yaml"},
        files(models__yaml='models:\n  x:\n    torch: "hf:../../etc"\n'), ["models", "list"],
        ["models.x.torch: 'hf:../../etc' is no Hugging Face repo id; expected hf:ORG/NAME"]),
    "SPECFLEET_MODELS: an unknown top-level field": (  # ignored without a word
        {"SPECFLEET_MODELS": "{here}/models.yaml"},
        files(models__yaml="extra: 1\nmodels:\n  x:\n    torch: /x\n"), ["models", "list"],
        ["models.yaml: unknown top-level field 'extra'; expected only 'models:'"]),
    "SPECFLEET_MODELS: anchors under x- keys are fine, a mistake beside them is named": (
        {"SPECFLEET_MODELS": "{here}/models.yaml"},
        files(models__yaml="x-src: &src {torch: 7}\nmodels:\n  x: *src\n"), ["models", "list"],
        ["models.x.torch: expected bundled, hf:ORG/NAME or a model folder, got 7"]),
    "generate: SPECFLEET_THREADS abc": (  # neither checked nor applied outside a worker
        {"SPECFLEET_THREADS": "abc"}, NO_FILES, ["generate", "-m", "smollm2-135m", "-p", "hi"],
        ["SPECFLEET_THREADS"]),
    "SPECFLEET_MODELS: a binary file": (
        {"SPECFLEET_MODELS": "{here}/models.bin"}, files(models__bin="\x89PNG\xff\x00"),
        ["models", "list"],
        ["SPECFLEET_MODELS {here}/models.bin: not UTF-8 text", "expected a YAML mapping"]),
    "SPECFLEET_HOME: a file, fetch": (
        {"SPECFLEET_HOME": "{here}/home"}, files(home="not a folder"),
        ["models", "fetch", "smollm2-135m"],
        ["SPECFLEET_HOME: {here}/home is a file, not a folder; expected a folder"]),
    # Relative, each read from the current folder: a resume run elsewhere saw no journal.
    "SPECFLEET_JOURNAL_DIR: a relative path": (
        {"SPECFLEET_JOURNAL_DIR": "journal"}, NO_FILES, ["db", "upgrade", "--db", "{db}"],
        ["SPECFLEET_JOURNAL_DIR: 'journal' is a relative path, so a command run from another "
         "folder would not find what it holds; expected a path starting with / or ~"]),
    "SPECFLEET_HOME: a relative path": (
        {"SPECFLEET_HOME": "home"}, NO_FILES, ["models", "list"],
        ["SPECFLEET_HOME: 'home' is a relative path", "expected a path starting with / or ~"]),
    "SPECFLEET_HOME: a file, list": (
        {"SPECFLEET_HOME": "{here}/home"}, files(home="not a folder"), ["models", "list"],
        ["SPECFLEET_HOME: {here}/home is a file, not a folder; expected a folder"]),
    "SPECFLEET_HOME: a file, generate": (  # it said `--model: SPECFLEET_HOME: ...`
        {"SPECFLEET_HOME": "{here}/home"}, files(home="not a folder"),
        ["generate", "-m", "smollm2-135m", "-p", "hi"],
        ["error: SPECFLEET_HOME: {here}/home is a file, not a folder; expected a folder"]),
    "SPECFLEET_HOME: cannot be made, fetch": (
        {"SPECFLEET_HOME": NOT_WRITABLE}, NO_FILES, ["models", "fetch", "smollm2-135m"],
        ["SPECFLEET_HOME: cannot create", "expected a folder you can write"]),
    "validate: a named pipe": (
        {}, files(m__yaml="fifo"), ["matrix", "validate", "{here}/m.yaml"],
        [f"{{here}}/m.yaml: {PIPE} regular file"]),
    "run: a named pipe": (
        {}, files(m__yaml="fifo"), run_args("{here}/m.yaml"),
        [f"{{here}}/m.yaml: {PIPE} regular file"]),
    "validate: a character device": (
        {}, NO_FILES, ["matrix", "validate", "/dev/null"],
        ["/dev/null: is a character device; expected a regular file"]),
    "validate: a prompt file that is a named pipe": (
        {}, files(m__yaml=STORY_HERE, story__txt="fifo"), ["matrix", "validate", "{here}/m.yaml"],
        [f"{{here}}/m.yaml: prompts[0]: {{here}}/story.txt: {PIPE} prompt text file"]),
    "generate: --prompt-file a named pipe": (
        {}, files(p__txt="fifo"), ["generate", "-m", "smollm2-135m", "--prompt-file",
                                   "{here}/p.txt"],
        [f"--prompt-file {{here}}/p.txt: {PIPE} text file"]),
    # Path('') is the matrix's own folder: the prompts beside it were read, "ok".
    "validate: prompt_dir empty": (
        {}, files(m__yaml=matrix(prompts="[story]", prompt_dir="''"), story__txt="hello"),
        ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: prompt_dir: '' is blank; expected a folder path relative to this file"]),
    "validate: prompt_dir a file": (  # it said the folder "does not exist"
        {}, files(m__yaml=matrix(prompts="[story]", prompt_dir="p.txt"), p__txt="hello"),
        ["matrix", "validate", "{here}/m.yaml"],
        ["prompts[0]: no prompt 'story': prompt directory {here}/p.txt is a file, not a "
         "folder"]),
    "validate: a prompt that is a directory": (
        {}, files(m__yaml=STORY_HERE, story="dir"), ["matrix", "validate", "{here}/m.yaml"],
        [f"{{here}}/m.yaml: prompts[0]: {STORY_DIR}"]),
    # It validated "ok" and ran story.txt; the user may have meant story.md.
    "validate: two prompt files of one name": (
        {}, files(m__yaml=STORY_HERE, story__txt="one", story__md="two"),
        ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: prompts[0]: {here}/story.txt and story.md beside it both name prompt "
         "'story'; expected one file of that name"]),
    "run: a prompt that is a directory": (
        {}, files(m__yaml=STORY_HERE, story="dir"), run_args("{here}/m.yaml"),
        [f"{{here}}/m.yaml: prompts[0]: {STORY_DIR}"]),
    # No prompt_dir and no ../prompts: `story` is the packaged prompt, yet a folder of that
    # name beside the matrix is what the user most likely meant.
    "validate: a directory beside the matrix named like a packaged prompt": (
        {}, files(m__yaml=STORY_PACKAGED, story="dir"), ["matrix", "validate", "{here}/m.yaml"],
        [f"{{here}}/m.yaml: prompts[0]: {STORY_DIR}"]),
    "run: a directory beside the matrix named like a packaged prompt": (
        {}, files(m__yaml=STORY_PACKAGED, story="dir"), run_args("{here}/m.yaml"),
        [f"{{here}}/m.yaml: prompts[0]: {STORY_DIR}"]),
    "validate: a named pipe beside the matrix named like a packaged prompt": (
        {}, files(m__yaml=STORY_PACKAGED, story__md="fifo"), ["matrix", "validate",
                                                               "{here}/m.yaml"],
        [f"{{here}}/m.yaml: prompts[0]: {{here}}/story.md: {PIPE} prompt text file"]),
    "validate: --local with --address": (
        {}, NO_FILES, ["matrix", "validate", "{tmp}/good.yaml", "--local", "--address",
                       "127.0.0.1:1"], ["--local and --address: give one of them"]),
    "run: --report-dir under a folder that does not exist": (  # the whole tree was made
        {}, NO_FILES, run_args("{tmp}/good.yaml", "--report-dir", "{here}/no/such/reports"),
        ["--report-dir {here}/no/such/reports: its folder {here}/no/such does not exist; "
         "expected a folder to write the records in, inside an existing one"]),
    "run: --report-dir of an unknown user's home": (  # a folder named `~x` was made here
        {}, NO_FILES, run_args("{tmp}/good.yaml", "--report-dir", f"~{NO_USER}/reports"),
        [f"no home folder for ~{NO_USER}"]),
    "run: SPECFLEET_JOURNAL_DIR under a folder that does not exist": (  # made from / down
        {"SPECFLEET_JOURNAL_DIR": "{here}/no/such/journal"}, NO_FILES, run_args("{tmp}/good.yaml"),
        ["SPECFLEET_JOURNAL_DIR {here}/no/such/journal: its folder {here}/no/such does not "
         "exist; expected a folder for the journal, inside an existing one"]),
    "run: --report-dir a named pipe": (
        {}, files(r="fifo"), run_args("{tmp}/good.yaml", "--report-dir", "{here}/r"),
        ["--report-dir: {here}/r is a named pipe (FIFO), not a folder; expected a folder"]),
    # Each said ": is a directory" (the current folder), naming nothing.
    "validate: an empty matrix file name": (
        {}, NO_FILES, ["matrix", "validate", ""],
        ["matrix file '' is blank; expected a YAML file or a packaged matrix (demo, "]),
    "run: an empty matrix file name": (
        {}, NO_FILES, run_args(""), ["matrix file '' is blank; expected a YAML file"]),
    "job generate: --prompts empty": (
        {}, NO_FILES, ["job", "generate", "--prompts", "", "--target", "h/toy", "--db", "{db}"],
        ["--prompts '' is blank; expected a JSONL file"]),
    # Bytes that are not UTF-8 reach Python as surrogate escapes: the tokenizer's TypeError,
    # SQLite's UnicodeEncodeError, each a traceback.
    "generate: a prompt that is not UTF-8": (
        {}, NO_FILES, ["generate", "-m", "smollm2-135m", "-p", "caf\udce9"],
        ["specfleet: argument 'caf\\udce9' is not UTF-8 text; expected UTF-8"]),
    "results: a --model that is not UTF-8": (
        {}, NO_FILES, ["results", "--model", "caf\udce9", "--db", "{db}"],
        ["argument 'caf\\udce9' is not UTF-8 text"]),
    "SPECFLEET_DB: not UTF-8": (
        {"SPECFLEET_DB": "{here}/caf\udce9.db"}, NO_FILES, ["db", "current"],
        ["SPECFLEET_DB: '{here}/caf\\udce9.db' is not UTF-8 text; expected UTF-8"]),
    # Path('') is the current folder: the record was written wherever the command ran.
    "report: --out empty": (
        {}, NO_FILES, ["report", "{mid}", "--db", "{db}", "--out", ""],
        ["--out '' is blank; expected a folder path"]),
    # Typer read each as Path('.'): "--prompt-file .: is a directory", the same of
    # --token-file, and matrix run would have written its record into the current folder.
    "generate: --prompt-file empty": (
        {}, NO_FILES, ["generate", "-m", "smollm2-135m", "--prompt-file", ""],
        ["--prompt-file '' is blank; expected a text file (- reads standard input)"]),
    "serve: --token-file empty": (
        {}, NO_FILES, ["serve", "--token-file", "", "--db", "{db}"],
        ["--token-file '' is blank; expected a file holding the token"]),
    "run: --report-dir empty": (
        {}, NO_FILES, ["matrix", "run", "{tmp}/good.yaml", "--report-dir", "", "--address",
                       "127.0.0.1:1", "--db", "{db}"],
        ["--report-dir '' is blank; expected a folder path"]),
    "report: --out a named pipe": (
        {}, files(r="fifo"), ["report", "{mid}", "--db", "{db}", "--out", "{here}/r"],
        ["--out: {here}/r is a named pipe (FIFO), not a folder; expected a folder"]),
    "SPECFLEET_MODELS: a directory": (
        {"SPECFLEET_MODELS": "{here}/m"}, files(m="dir"), ["models", "list"],
        ["SPECFLEET_MODELS {here}/m: is a directory; expected a YAML mapping"]),
    "SPECFLEET_MODELS: a named pipe": (
        {"SPECFLEET_MODELS": "{here}/m"}, files(m="fifo"), ["models", "list"],
        [f"SPECFLEET_MODELS {{here}}/m: {PIPE} YAML mapping"]),
    "SPECFLEET_HOME: a named pipe, fetch": (
        {"SPECFLEET_HOME": "{here}/home"}, files(home="fifo"), ["models", "fetch", "smollm2-135m"],
        ["SPECFLEET_HOME: {here}/home is a named pipe (FIFO), not a folder; expected a folder"]),
    "SPECFLEET_JOURNAL_DIR: a file, run": (
        {"SPECFLEET_JOURNAL_DIR": "{here}/j"}, files(j="results go here"),
        run_args("{tmp}/good.yaml"),
        ["SPECFLEET_JOURNAL_DIR: {here}/j is a file, not a folder; expected a folder"]),
    "SPECFLEET_JOURNAL_DIR: cannot be made, run": (
        {"SPECFLEET_JOURNAL_DIR": NOT_WRITABLE}, NO_FILES, run_args("{tmp}/good.yaml"),
        [f"SPECFLEET_JOURNAL_DIR: cannot create {NOT_WRITABLE}",
         "expected a folder you can write"]),
    "RAY_AUTH_TOKEN_PATH: a directory": (
        {"RAY_AUTH_TOKEN_PATH": "{here}/t"}, files(t="dir"), FLEET_STATUS,
        ["RAY_AUTH_TOKEN_PATH {here}/t: is a directory; expected the head's token file"]),
    "RAY_AUTH_TOKEN_PATH: a named pipe": (
        {"RAY_AUTH_TOKEN_PATH": "{here}/t"}, files(t="fifo"), FLEET_STATUS,
        ["RAY_AUTH_TOKEN_PATH {here}/t: is a named pipe (FIFO); expected the head's token"]),
    "RAY_AUTH_TOKEN_PATH: a binary file": (
        {"RAY_AUTH_TOKEN_PATH": "{here}/t"}, files(t="\xff\xfe\x00"), FLEET_STATUS,
        ["RAY_AUTH_TOKEN_PATH {here}/t: not UTF-8 text (byte 0)", "expected the head's token"]),
    "RAY_AUTH_TOKEN_PATH: an empty file": (
        {"RAY_AUTH_TOKEN_PATH": "{here}/t"}, files(t=""), FLEET_STATUS,
        ["RAY_AUTH_TOKEN_PATH {here}/t: is empty; expected the head's token file"]),
    "job generate: --prompts a named pipe": (
        {}, files(b__jsonl="fifo"), ["job", "generate", "--prompts", "{here}/b.jsonl",
                                     "--target", "h/toy", "--db", "{db}"],
        [f"{{here}}/b.jsonl: {PIPE} JSONL file, one {{\"prompt\": ...}} a line (or - to read "
         "standard input)"]),
    "job generate: --prompts a binary file": (
        {}, files(b__jsonl="\x89PNG\xff\x00"), ["job", "generate", "--prompts",
                                                 "{here}/b.jsonl", "--target", "h/toy",
                                                 "--db", "{db}"],
        ["{here}/b.jsonl: not UTF-8 text (byte 0); expected a JSONL file"]),
    "job generate: --prompt-lookup-max-draft 0": (
        {}, files(b__jsonl='{"prompt": "hi"}\n'), [
            "job", "generate", "--prompts", "{here}/b.jsonl", "--target", "h/toy",
            "--prompt-lookup-max-draft", "0", "--db", "{db}"],
        ["--prompt-lookup-max-draft: max-draft must be at least 1"]),
    # Refused before the model loads: measuring first took minutes before the store failed.
    "calibrate --store: --db a directory": (
        {}, files(d="dir"), ["calibrate", "-m", "smollm2-135m", "--quick", "--store", "--db",
                             "{here}/d"],
        ["--db: {here}/d is not a regular file; give a SQLite file path"]),
    "db upgrade: --db inside a file": (
        {}, NO_FILES, ["db", "upgrade", "--db", "{tmp}/afile/x.db"],
        ["--db: {tmp}/afile is a file, not a folder"]),
    # `join` of a closed port: a check that failed to refuse could start no Ray node.
    "fleet join: --temp-dir inside a device": (  # short: Ray limits the folder's length
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--temp-dir",
                       "/dev/null/ray"],
        ["--temp-dir: /dev/null is a character device, not a folder, so /dev/null/ray cannot "
         "be made inside it; expected a folder"]),
    "fleet join: --temp-dir cannot be made": (
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--temp-dir",
                       NOT_WRITABLE],
        [f"--temp-dir: cannot create {NOT_WRITABLE}", "expected a folder you can write"]),
    "replay: --costs a binary YAML file": (
        {}, files(c__yaml="\x89PNG\xff\x00"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: not UTF-8 text (byte 0); expected a YAML width-cost table"]),
    "replay: --costs a named pipe": (
        {}, files(c__yaml="fifo"), REPLAY_COSTS,
        [f"--costs {{here}}/c.yaml: {PIPE} YAML width-cost table"]),
    "replay: --costs a folder": (
        {}, files(c__yaml="dir"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: is a directory; expected a YAML width-cost table"]),
    "fleet up: --num-cpus 10^23": (  # `ray start --head` ran, then failed on it
        {}, NO_FILES, ["fleet", "up", "--num-cpus", "99999999999999999999999"],
        ["--num-cpus", "expected a number <= 4096"]),
    "fleet join: --node-ip not an address": (
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--node-ip", "300.1.1.1"],
        ["--node-ip '300.1.1.1': expected this host's IP address"]),
    "fleet up: --node-ip another machine's address": (  # Ray started, then hung
        {}, NO_FILES, ["fleet", "up", "--node-ip", "192.0.2.77"],
        ["--node-ip 192.0.2.77: not an address of this machine", "expected this host's IP"]),
    "fleet up: --node-ip a scoped link-local address not here": (  # Ray started, then hung
        {}, NO_FILES, ["fleet", "up", "--node-ip", "fe80::1%lo"],
        ["--node-ip fe80::1%lo: not an address of this machine"]),
    "fleet join: --engines with an empty name": (  # dropped: `torch,,mlx` read as torch,mlx
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--engines", "torch,,mlx"],
        ["--engines 'torch,,mlx': expected a comma-separated subset of mlx, torch"]),
    "fleet join: --node-ip the wildcard": (
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--node-ip", "0.0.0.0"],
        ["--node-ip 0.0.0.0: not one host's address"]),
    "list: --limit past SQLite's integers": (
        {}, NO_FILES, ["matrix", "list", "--limit", "99999999999999999999", "--db", "{db}"],
        ["--limit", "expected a number <= 1000000"]),
    "parity run: a missing file, --db a new store": (  # the store was made, then refused
        {}, NO_FILES, ["parity", "run", "{here}/none.yaml", "--db", "{here}/new.db"],
        ["{here}/none.yaml: no such file"]),
    "results: a blank --host": (  # it matched nothing and said nothing was found
        {}, NO_FILES, ["results", "--host", " ", "--db", "{db}"],
        ["--host: expected a value, got a blank one"]),
    "results: a blank --version": (
        {}, NO_FILES, ["results", "--version", "", "--db", "{db}"],
        ["--version: expected a value, got a blank one"]),
    "db current: a store in a folder that does not exist": (  # said 'db upgrade creates it'
        {}, NO_FILES, ["db", "current", "--db", "sqlite:///{here}/nope/x.db"],
        ["--db: directory {here}/nope does not exist; expected a store in an existing folder"]),
    "db current: a file name too long for the file system": (
        {}, NO_FILES, ["db", "current", "--db", f"{{here}}/{LONG_NAME}.db"],
        [f"--db: {{here}}/{LONG_NAME}.db: the path or one of its names is too long"]),
    "db upgrade: a SQLite URL whose file name is too long": (
        {}, NO_FILES, ["db", "upgrade", "--db", f"sqlite:///{{here}}/{LONG_NAME}.db"],
        ["--db: ", "too long for the file system; expected a SQLite file path"]),
    "SPECFLEET_DB: a file name too long, list": (
        {"SPECFLEET_DB": f"{{here}}/{LONG_NAME}.db"}, NO_FILES, ["matrix", "list"],
        ["SPECFLEET_DB: ", "too long for the file system"]),
    "db current: a NUL in a file path": (  # a ValueError traceback (a URL was refused)
        {}, NO_FILES, ["db", "current", "--db", "{here}/a\0b.db"],
        ["--db: contains a NUL character; expected sqlite:///PATH or "]),
    "db current: a SQLite URL whose path is blank": (  # "no database file yet", exit 0
        {}, NO_FILES, ["db", "current", "--db", "sqlite:///   "],
        ["--db: 'sqlite:///   ' starts or ends with whitespace; expected sqlite:///PATH"]),
    # Path.expanduser's RuntimeError was a traceback in each.
    "db current: --db under the home of no user": (
        {}, NO_FILES, ["db", "current", "--db", f"~{NO_USER}/x.db"],
        [f"--db '~{NO_USER}/x.db': no home folder for ~{NO_USER}; expected ~ or ~USER of a "
         "known user"]),
    "SPECFLEET_HOME: under the home of no user": (
        {"SPECFLEET_HOME": f"~{NO_USER}/h"}, NO_FILES, ["models", "list"],
        [f"SPECFLEET_HOME '~{NO_USER}/h': no home folder for ~{NO_USER}"]),
    "generate: a model folder under the home of no user": (
        {}, NO_FILES, ["generate", "-m", f"~{NO_USER}/m", "-p", "hi"],
        [f"--model: model '~{NO_USER}/m': no home folder for ~{NO_USER}"]),
    "SPECFLEET_MODELS: a source under the home of no user": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml=f"models: {{x: {{torch: '~{NO_USER}/m'}}}}\n"),
        ["models", "list"], [f"{{here}}/m.yaml: model source '~{NO_USER}/m': no home folder"]),
    "fleet join: --temp-dir under the home of no user": (
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--temp-dir",
                       f"~{NO_USER}/t"], [f"--temp-dir '~{NO_USER}/t': no home folder"]),
    "db current: --db empty": (  # not the default store: a script's unset variable
        {}, NO_FILES, ["db", "current", "--db", ""], ["--db: '' is blank; expected"]),
    "db current: --db blank": (
        {}, NO_FILES, ["db", "current", "--db", "   "], ["--db: '   ' is blank; expected"]),
    "SPECFLEET_DB: blank": (
        {"SPECFLEET_DB": "  "}, NO_FILES, ["db", "current"], ["SPECFLEET_DB: '  ' is blank"]),
    "db current: a SQLite URL with query options": (
        {}, NO_FILES, ["db", "current", "--db", "sqlite:///{db}?mode=ro"],
        ["SQLite URLs take no query options; expected sqlite:///PATH"]),
    # `#frag` became part of the file name: "no database file yet", exit status 0.
    "db current: a SQLite URL with a fragment": (
        {}, NO_FILES, ["db", "current", "--db", "sqlite:///{here}/x.db#frag"],
        ["--db: sqlite:///{here}/x.db#frag: a database URL takes no #fragment; expected "
         "sqlite:///PATH (a # in a name is written %23)"]),
    "SPECFLEET_DB: a PostgreSQL URL with a fragment": (
        {"SPECFLEET_DB": "postgresql://u:s3cret@127.0.0.1:1/db#frag"}, NO_FILES,
        ["db", "current"], ["SPECFLEET_DB: postgresql://u:***@127.0.0.1:1/db#frag: a database "
                            "URL takes no #fragment"]),
    # Each named --db, a flag the user never gave.
    "SPECFLEET_DB: a text file": (
        {"SPECFLEET_DB": "{here}/s.db"}, files(s__db="not a database\n"), ["results"],
        ["SPECFLEET_DB: {here}/s.db is not a usable SQLite database"]),
    "SPECFLEET_DB: a closed PostgreSQL port": (
        {"SPECFLEET_DB": "postgresql://u:s3cret@127.0.0.1:1/db"}, NO_FILES, ["matrix", "list"],
        ["SPECFLEET_DB: cannot reach PostgreSQL at postgresql+psycopg://u:***@127.0.0.1:1/db"]),
    "bench: a closed PostgreSQL port": (  # said after the embedded fleet started (~20 s)
        {}, NO_FILES, ["bench", "-m", "smollm2-135m", "-p", "story", "-a", "plain", "-r", "1",
                       "-e", "torch", "--db", "postgresql://u:s3cret@127.0.0.1:1/db"],
        ["--db: cannot reach PostgreSQL at postgresql+psycopg://u:***@127.0.0.1:1/db"]),
    "SPECFLEET_DB: a folder that does not exist, db upgrade": (
        {"SPECFLEET_DB": "{here}/no/x.db"}, NO_FILES, ["db", "upgrade"],
        ["SPECFLEET_DB: directory {here}/no does not exist"]),
    "SPECFLEET_DB: another application's database": (
        {"SPECFLEET_DB": "{tmp}/someapp.sqlite"}, NO_FILES, ["db", "upgrade"],
        ["SPECFLEET_DB: ", "is not a specfleet store", "point SPECFLEET_DB at"]),
    "--db beside SPECFLEET_DB: the flag is named": (
        {"SPECFLEET_DB": "{tmp}/store.db"}, files(s__db="not a database\n"),
        ["results", "--db", "{here}/s.db"], ["--db: {here}/s.db is not a usable SQLite"]),
    # Each said "cannot reach PostgreSQL": a mistyped option, not the network.
    "db current: a PostgreSQL URL with an unknown option": (
        {}, NO_FILES, ["db", "current", "--db", "postgresql://u@127.0.0.1:1/db?colour=red"],
        ['invalid connection option "colour"; expected libpq\'s connection options']),
    "db current: a PostgreSQL URL with a bad sslmode": (
        {}, NO_FILES, ["db", "current", "--db", "postgresql://u@127.0.0.1:1/db?sslmode=maybe"],
        ['invalid sslmode value: "maybe"; expected libpq\'s connection options']),
    # A reading command: a named pipe hung it (SQLite's open waits for a writer, even past
    # SIGTERM), a folder was "cannot write ... (disk I/O error)", /dev/null "none (empty)".
    "db current: --db a named pipe": (
        {}, files(s__db="fifo"), ["db", "current", "--db", "{here}/s.db"],
        ["--db: {here}/s.db is not a regular file; give a SQLite file path"]),
    "db current: --db a folder": (
        {}, files(s__db="dir"), ["db", "current", "--db", "{here}/s.db"],
        ["--db: {here}/s.db is not a regular file; give a SQLite file path"]),
    # Resolving the path raised RuntimeError("Symlink loop"): a traceback in every command.
    "results: --db a link to itself": (
        {}, files(s__db="loop"), ["results", "--db", "{here}/s.db"],
        ["--db: {here}/s.db: cannot be followed (Symlink loop from '{here}/s.db'); expected a "
         "SQLite file path"]),
    "results: --db a file with a trailing slash": (  # Path() dropped it and read the file
        {}, files(s__db="not a store"), ["results", "--db", "{here}/s.db/"],
        ["--db '{here}/s.db/': a trailing '/' names a folder; expected a SQLite file path"]),
    "db current: --db a character device": (
        {}, NO_FILES, ["db", "current", "--db", "/dev/null"],
        ["--db: /dev/null is not a regular file; give a SQLite file path"]),
    "db current: --db inside a file": (
        {}, NO_FILES, ["db", "current", "--db", "{tmp}/afile/x.db"],
        ["--db: {tmp}/afile is a file, not a folder"]),
    # Each said "expected HOST:PORT" of a value Ray itself reads.
    "RAY_ADDRESS=auto, no cluster started here": (
        {"RAY_ADDRESS": "auto", "RAY_TMPDIR": "{here}"}, NO_FILES, ["fleet", "status"],
        ["$RAY_ADDRESS=auto: no Ray cluster started on this machine ({here}/ray/"
         "ray_current_cluster, which `ray start --head` writes, is missing)"]),
    "RAY_ADDRESS=auto, a record that is no address": (
        {"RAY_ADDRESS": "auto", "RAY_TMPDIR": "{here}"}, ray_record("ray://x:1\n"),
        ["fleet", "status"], ["$RAY_ADDRESS=auto via {here}/ray/ray_current_cluster "
                              "'ray://x:1': a Ray Client address"]),
    "RAY_ADDRESS: a Ray Client address": (
        {"RAY_ADDRESS": "ray://127.0.0.1:10001"}, NO_FILES, ["fleet", "status"],
        ["$RAY_ADDRESS 'ray://127.0.0.1:10001': a Ray Client address, which specfleet does not "
         "use; expected the head's HOST:PORT"]),
    "--address: a Ray dashboard address": (
        {}, NO_FILES, ["fleet", "status", "--address", "http://127.0.0.1:8265"],
        ["--address 'http://127.0.0.1:8265': a Ray dashboard address"]),
    "fleet status: an empty label in --address": (
        {}, NO_FILES, ["fleet", "status", "--address", "a..b:1"],
        ["--address 'a..b:1': expected HOST:PORT"]),
    # int() reads any script's digits: this tried a connection to port 3.
    "fleet status: a port in Arabic-Indic digits": (
        {}, NO_FILES, ["fleet", "status", "--address", "127.0.0.1:\u0663"],
        ["--address '127.0.0.1:\u0663': expected HOST:PORT"]),
    "fleet join: a head label of 64 characters": (
        {}, NO_FILES, ["fleet", "join", f"{'h' * 64}.example:1", "--name", "h9"],
        ["HEAD 'hhh", "expected HOST:PORT"]),
    "SPECFLEET_ADDRESS: a host of 300 characters": (
        {"SPECFLEET_ADDRESS": f"{'h' * 300}:1"}, NO_FILES, ["fleet", "status"],
        ["$SPECFLEET_ADDRESS 'hhh", "expected HOST:PORT"]),
    "serve: --host that does not resolve": (
        {}, files(t="abcdefghijklmnopqrstuvwxyz0123\n"),
        ["serve", "--host", "not a host", "--token-file", "{here}/t", "--db", "{db}"],
        ["--host 'not a host': cannot resolve it", "expected an address of this machine"]),
    "serve: --matrix blank": (  # said "no matrix ''" without naming the flag
        {}, NO_FILES, ["serve", "--matrix", " ", "--db", "{db}"],
        ["--matrix: expected a matrix id (`specfleet matrix list`), got a blank one"]),
    # Each said "no matrix ''" without naming the argument or flag.
    "parity: --baseline empty": (
        {}, NO_FILES, ["parity", "{mid}", "--baseline", "", "--db", "{db}"],
        [f"--baseline: {BLANK_MATRIX}, got a blank one"]),
    "parity: a blank matrix id": (
        {}, NO_FILES, ["parity", " ", "--db", "{db}"],
        [f"MATRIX_ID|run: {BLANK_MATRIX} or `run FILE`, got a blank one"]),
    "compare: an empty baseline id": (
        {}, NO_FILES, ["compare", "", "{mid}", "--db", "{db}"], [f"A: {BLANK_MATRIX}"]),
    "compare: an empty second id": (
        {}, NO_FILES, ["compare", "{mid}", "", "--db", "{db}"], [f"B: {BLANK_MATRIX}"]),
    "report: an empty matrix id": (
        {}, NO_FILES, ["report", "", "--db", "{db}"], [f"MATRIX_ID: {BLANK_MATRIX}"]),
    "matrix status: an empty matrix id": (
        {}, NO_FILES, ["matrix", "status", "", "--db", "{db}"], [f"MATRIX_ID: {BLANK_MATRIX}"]),
    "matrix resume: a blank matrix id": (
        {}, NO_FILES, ["matrix", "resume", "  ", "--db", "{db}"], [f"MATRIX_ID: {BLANK_MATRIX}"]),
    "replay: an empty RUN_OR_MATRIX": (  # it said "no matrix, generation job or run ''"
        {}, NO_FILES, ["replay", "", "--costs", "apple-m4pro", "--db", "{db}"],
        [f"RUN_OR_MATRIX: {BLANK_MATRIX}, a generation job id or a run key, got a blank one"]),
    # With no done run to pivot it said "no done runs match these filters", exit status 0.
    "results: an unknown --pivot": (
        {}, NO_FILES, ["results", "--pivot", "model", "--model", "nope", "--db", "{db}"],
        ["--pivot: unknown pivot 'model'; expected 'target'"]),
    "matrix show: an empty matrix id": (
        {}, NO_FILES, ["matrix", "show", "", "--db", "{db}"], [f"MATRIX_ID: {BLANK_MATRIX}"]),
    "results: --since not before --until": (  # it said what was wrong, not what is expected
        {}, NO_FILES, ["results", "--since", "2026-12-06T23:00", "--until", "2026-12-06",
                       "--db", "{db}"],
        ["--since 2026-12-06T23:00 is not before --until 2026-12-06; expected a --since "
         "earlier than --until"]),
    "serve: --host empty": (  # it listened on every address and printed http://:8266/
        {}, NO_FILES, ["serve", "--host", "", "--db", "{db}"],
        ["--host '' is blank; expected an address of this machine"]),
    "serve: --host blank": (  # it asked for a token to show the view to the network
        {}, NO_FILES, ["serve", "--host", " ", "--db", "{db}"],
        ["--host ' ' is blank; expected an address of this machine"]),
    "serve: --token-file other users may read": (  # it was taken without a word
        {}, files(t="shared token"), ["serve", "--token-file", "{here}/t", "--db", "{db}"],
        ["--token-file {here}/t: other users may read or change it (mode 0644)",
         "expected a file only its owner can use (chmod 600 {here}/t)"]),
    "serve: --host of another machine": (  # 192.0.2.0/24 is documentation's, never local
        {}, files(t="abcdefghijklmnopqrstuvwxyz0123\n"),
        ["serve", "--host", "192.0.2.1", "--token-file", "{here}/t", "--db", "{db}"],
        ["--host 192.0.2.1: not an address of this machine"]),
    "SPECFLEET_MODELS: a source that is a number": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {x: {torch: 5}}\n"),
        ["models", "list"],
        ["SPECFLEET_MODELS {here}/m.yaml: models.x.torch: expected bundled, hf:ORG/NAME or a "
         "model folder, got 5"]),
    "SPECFLEET_MODELS: an empty hf id": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {x: {mlx: 'hf:'}}\n"),
        ["models", "list"], ["models.x.mlx: 'hf:' is no Hugging Face repo id; expected hf:ORG/NAME"]),
    "SPECFLEET_MODELS: an unknown engine": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml="models: {x: {torch: bundled, cuda: bundled}}\n"), ["models", "list"],
        ["models.x.cuda: unknown field; expected description or a source per engine"]),
    "SPECFLEET_MODELS: a blank alias": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {'': {torch: bundled}}\n"),
        ["models", "list"], ["models: alias '' is not a name"]),
    "SPECFLEET_MODELS: an alias with a comma": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {'a,b': {torch: bundled}}\n"),
        ["models", "list"], ["models: alias 'a,b' holds a space or a comma; expected a name"]),
    "SPECFLEET_MODELS: an alias with a space": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {'my model': {torch: bundled}}\n"),
        ["models", "list"], ["models: alias 'my model' holds a space or a comma"]),
    # PyYAML's RecursionError was a traceback; a key given twice let the last one win; a
    # value made of aliases was repeated in full in the message (500 MB for 10^8 items).
    "SPECFLEET_MODELS: nested 20000 deep": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml="models: " + "[" * 20000 + "]" * 20000 + "\n"), ["models", "list"],
        ["SPECFLEET_MODELS {here}/m.yaml: nested too deeply"]),
    "SPECFLEET_MODELS: an alias twice": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml="models:\n  a: {torch: bundled}\n  a: {torch: 'hf:x/y'}\n"),
        ["models", "list"], ["SPECFLEET_MODELS {here}/m.yaml: line 3, column 3: YAML syntax "
                             "error: duplicate key 'a'"]),
    "SPECFLEET_MODELS: a description of a million aliased items": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml="a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
            f"{n}: &{n} [{','.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True))
            + "models: {m: {torch: bundled, description: *f}}\n"),
        ["models", "list"], ["models.m.description: expected text, got a list"]),
    "generate: --model blank": (
        {}, NO_FILES, ["generate", "-m", "", "-p", "hi"],
        ["--model: model '' is blank; expected an alias"]),
    # A model folder whose config says 64 positions: refused before anything loads.
    "calibrate: --prompt-len past the model's context": (
        {}, files(config__json='{"max_position_embeddings": 64}'),
        ["calibrate", "-m", "{here}", "--prompt-len", "100000"],
        ["--prompt-len 100000: a round needs", "has a context of 64 tokens"]),
    "calibrate: --db without --store": (  # it measured for a minute, then stored nothing
        {}, NO_FILES, ["calibrate", "-m", "smollm2-135m", "--quick", "--db", "{tmp}/c.db"],
        ["--db {tmp}/c.db is where --store keeps the table, and --store is not given; "
         "expected --store beside --db"]),
    "calibrate: --reps past the model's context": (  # it blamed --prompt-len 300
        {}, files(config__json='{"max_position_embeddings": 64}'),
        ["calibrate", "-m", "{here}", "--reps", "50"],
        ["--reps 50: a round needs", "has a context of 64 tokens; "
         "expected a smaller --reps"]),
    # transformers' and mlx-lm's loaders failed on these with a traceback.
    "generate: a model folder whose config.json is not JSON": (
        {}, files(config__json="garbage"), ["generate", "-m", "{here}", "-p", "hi", "--engine",
                                            "torch"],
        ["--model: model '{here}': {here}/config.json: not JSON (Expecting value at line 1 "
         "column 1); expected a model's config.json (a JSON object)"]),
    "calibrate: a model folder whose config.json is a list": (
        {}, files(config__json="[1]"), ["calibrate", "-m", "{here}", "--engine", "torch"],
        ["--model: model '{here}': {here}/config.json: expected a model's config.json (a JSON "
         "object), got a list"]),
    # A folder the model library itself refuses: its traceback (or a ValueError) reached the user.
    "generate: a folder whose config.json has no model_type (torch)": (
        {}, files(config__json="{}", w__safetensors=NO_TENSORS, tokenizer__json=WORD_TOKENIZER),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "torch"],
        ["the torch engine cannot load this folder (Unrecognized model in",
         "expected a model folder with config.json (its model_type)"]),
    "generate: a folder of an unknown model_type (torch)": (
        {}, files(config__json='{"model_type": "nosuchmodel"}', w__safetensors=NO_TENSORS,
                  tokenizer__json=WORD_TOKENIZER),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "torch"],
        ["--model {here}: {here}: model_type 'nosuchmodel' is an architecture the torch engine "
         "does not know; expected one its library (transformers) implements"]),
    "generate: a folder without weights (mlx)": (
        {}, files(config__json='{"model_type": "llama"}'),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "mlx"],
        ["--model {here}: {here} holds no weights; expected the model's *.safetensors beside "
         "its config.json"]),
    # Each a traceback: transformers' TypeError, its config validation.
    "generate: a model_type that is a list (torch)": (
        {}, files(config__json='{"model_type": ["llama"]}'),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "torch"],
        ["{here}/config.json: model_type: expected the architecture's name (text), got a list"]),
    "generate: a config field of the wrong type (torch)": (
        {}, files(config__json='{"model_type": "llama", "max_position_embeddings": "many"}',
                  w__safetensors=NO_TENSORS, tokenizer__json=WORD_TOKENIZER),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "torch"],
        ["the torch engine cannot load this folder (Validation error for field "
         "'max_position_embeddings': TypeError: Field 'max_position_embeddings' expected int"]),
    # Each a TypeError traceback from inside the library's loader (a list, null or number
    # where it reads a JSON object); the file is named.
    "generate: a tokenizer.json that is a list (mlx)": (
        {}, files(config__json='{"model_type": "llama"}', tokenizer__json="[]",
                  w__safetensors=NO_TENSORS),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "mlx"],
        ["--model {here}: {here}/tokenizer.json: expected a JSON object, got a list"]),
    "generate: a generation_config.json that is null (torch)": (
        {}, files(config__json='{"model_type": "llama"}', generation_config__json="null",
                  w__safetensors=NO_TENSORS, tokenizer__json=WORD_TOKENIZER),
        ["generate", "-m", "{here}", "-p", "hi", "--engine", "torch"],
        ["{here}/generation_config.json: expected a JSON object, got nothing (null)"]),
    # Every run failed once the embedded fleet had started, the failed job stored.
    "job generate: max_tokens past the model's context, embedded": (
        {}, files(config__json='{"model_type": "llama", "max_position_embeddings": 64}',
                  w__safetensors=NO_TENSORS, tokenizer__json=WORD_TOKENIZER,
                  b__jsonl='{"prompt": "hi hi"}\n{"prompt": "hi", "max_tokens": 64}\n'),
        ["job", "generate", "--prompts", "{here}/b.jsonl", "--target", f"{HERE}/torch",
         "--model", "{here}", "--embedded", "--max-tokens", "8", "--db", "{db}"],
        ["{here}/b.jsonl: prompt 'line-2': 1 tokens before any chat template and max_tokens 64 "
         "(the line's) pass the context of {here} (64 tokens); expected a shorter prompt or a "
         "smaller max_tokens"]),
    "job generate: a model folder whose tokenizer_config.json is not JSON, embedded": (
        {}, files(config__json='{"model_type": "llama"}', w__safetensors=NO_TENSORS,
                  tokenizer_config__json="{", b__jsonl='{"prompt": "hi"}\n'),
        ["job", "generate", "--prompts", "{here}/b.jsonl", "--target", f"{HERE}/torch",
         "--model", "{here}", "--embedded", "--db", "{db}"],
        ["--model: torch: {here}/tokenizer_config.json: not JSON (Expecting property name "
         "enclosed in double quotes at line 1 column 2); expected a JSON object"]),
    # A model whose context is not known: a huge value ran for hours.
    "calibrate: --rounds past its bound": (
        {}, files(config__json="{}"), ["calibrate", "-m", "{here}", "--rounds", "5000"],
        ["'--rounds': expected a number <= 1000"]),
    "calibrate: --steps past its bound": (
        {}, files(config__json="{}"), ["calibrate", "-m", "{here}", "--steps", "100000"],
        ["'--steps': expected a number <= 10000"]),
    "calibrate: --reps past its bound": (
        {}, files(config__json="{}"), ["calibrate", "-m", "{here}", "--reps", "101"],
        ["'--reps': expected a number <= 100"]),
    # On the embedded fleet a model this machine cannot run is refused before Ray starts:
    # each run would fail, and the matrix of failures would stay in the store.
    "run: a hosts selector the embedded fleet lacks": (  # said after ~20 s of Ray starting
        {"SPECFLEET_HOST": "here1"},
        files(m__yaml=matrix(targets="{engines: [toy], hosts: [spark1, mac1]}")),
        run_args("{here}/m.yaml"),
        ["{here}/m.yaml: targets.hosts: spark1, mac1 are not in the embedded fleet, which is "
         "this machine alone (here1); expected here1 or a fleet's --address"]),
    "run: an unknown model": (
        {}, files(m__yaml=matrix(models="[no-such-model]", targets="{engines: [torch]}")),
        run_args("{here}/m.yaml"),
        ["{here}/m.yaml: models[0]: torch: model 'no-such-model' is neither an alias"]),
    "run: not a toy model's name": (
        {}, files(m__yaml=matrix(models="['nokind:1ms']")), run_args("{here}/m.yaml"),
        ["{here}/m.yaml: models[0]: toy: model 'nokind:1ms': a toy model is"]),
    "bench: an unknown model": (
        {}, NO_FILES, ["bench", "-m", "no-such-model", "-p", "story", "-e", "torch", "--db",
                       "{db}", "--embedded", "--no-progress"],
        ["bench: --model no-such-model: torch: model 'no-such-model' is neither an alias"]),
    "bench: --prompt a file that is not there": (  # "prompts[0].name: use letters, ..."
        {}, NO_FILES, ["bench", "-m", "script:1ms", "-p", "{here}/p.txt", "-e", "toy",
                       "--address", "127.0.0.1:1", "--db", "{db}"],
        ["{here}/p.txt: no such file; expected a prompt text file"]),
    "bench: --prompt a name too long for the file system": (  # an OSError traceback
        {}, NO_FILES, ["bench", "-m", "script:1ms", "-p", "x" * 300, "-e", "toy",
                       "--address", "127.0.0.1:1", "--db", "{db}"],
        ["bench: --prompt xxxx", "must be at most 128 characters"]),
    "bench: --prompt a file name too long for the file system": (  # an OSError traceback
        {}, NO_FILES, ["bench", "-m", "script:1ms", "-p", "{here}/" + "x" * 300 + ".txt",
                       "-e", "toy", "--address", "127.0.0.1:1", "--db", "{db}"],
        ["cannot read (File name too long); expected a prompt text file"]),
    "bench: an unknown model, --db a new store": (  # the store was made, then refused
        {}, NO_FILES, ["bench", "-m", "no-such-model", "-p", "story", "-e", "torch", "--db",
                       "{here}/new.db", "--embedded", "--no-progress"],
        ["bench: --model no-such-model: torch: model 'no-such-model' is neither an alias"]),
    "job generate: a host the embedded fleet lacks": (
        {"SPECFLEET_HOST": "here1"}, files(p__jsonl='{"prompt": "hi"}\n'),
        ["job", "generate", "--prompts", "{here}/p.jsonl", "--target", "nohost/toy", "--model",
         "script:1ms", "--embedded", "--db", "{db}"],
        ["--target: nohost is not in the embedded fleet", "expected here1"]),
    "job calibrate: a host the embedded fleet lacks": (
        {"SPECFLEET_HOST": "here1"}, NO_FILES,
        ["job", "calibrate", "--model", "smollm2-135m", "--host", "otherhost", "--embedded",
         "--db", "{db}"],
        ["--host: otherhost is not in the embedded fleet", "expected here1"]),
    # `results` refused these; `history` searched for them and said "no done runs".
    "history: an unknown --arm": (
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "p", "--arm", "turbo", "--db",
                       "{db}"],
        ["--arm: unknown value 'turbo'; expected one of plain, "]),
    "history: an unknown engine in --target": (
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "p", "--arm", "plain", "--target",
                       "h/cuda", "--db", "{db}"],
        ["--target ENGINE: unknown value 'cuda'; expected one of mlx, torch"]),
    "history: an unknown device in --target": (
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "p", "--arm", "plain", "--target",
                       "h/torch/tpu", "--db", "{db}"],
        ["--target DEVICE: unknown value 'tpu'; expected one of "]),
    "history: a host no fleet could have in --target": (  # it said "no done runs"
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "p", "--arm", "plain", "--target",
                       "bad host/torch", "--db", "{db}"],
        ["--target HOST: expected a host name of letters, digits", "got 'bad host'"]),
    "history: --target empty": (  # it showed every target, exit status 0
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "p", "--arm", "plain", "--target",
                       "", "--db", "{db}"],
        ["--target: expected HOST, HOST/ENGINE or HOST/ENGINE/DEVICE, got ''"]),
    "history: a blank --model": (  # `results` refused it; history said "no done runs"
        {}, NO_FILES, ["history", "--model", " ", "--prompt", "p", "--arm", "plain", "--db",
                       "{db}"], ["--model: expected a model alias, got a blank one"]),
    # Each reached the fleet (or started the embedded one) for a model no host has.
    "job generate: a blank --model": (
        {}, files(b__jsonl='{"prompt": "hi"}\n'), [*JOB_BATCH, "--model", " ", "--address",
                                                    "127.0.0.1:1"],
        ["--model: expected a model alias, got a blank one"]),
    "job calibrate: an empty --model": (
        {}, NO_FILES, ["job", "calibrate", "--model", "", "--address", "127.0.0.1:1", "--db",
                       "{db}"], ["--model: expected a model alias, got a blank one"]),
    "history: an empty --prompt": (
        {}, NO_FILES, ["history", "--model", "m", "--prompt", "", "--arm", "plain", "--db",
                       "{db}"], ["--prompt: expected a value, got a blank one"]),
    "history: --factor inf": (
        {}, NO_FILES, ["history", "--db", "{db}", "--factor", "inf"],
        ["--factor", "100"]),
    "compare: --factor nan": (  # it said "less than or equal to 100"
        {}, NO_FILES, ["compare", "{mid}", "{mid}", "--db", "{db}", "--factor", "nan"],
        ["--factor': expected a ratio from 1 to 100 (1.1 = 10%), got nan"]),
    "replay: --costs with an unknown field": (
        {}, files(c__yaml="ratio: [1.0, 1.2]\nratios: [1.0, 1.3]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: unknown field 'ratios'; expected name, host, engine, device, "
         "pipelined_ms or ratio (or what `calibrate --json` writes beside them)"]),
    # Each said "expected a mapping" of a field mostly written as a scalar.
    "matrix validate: max_tokens as text": (
        {}, files(m__yaml=matrix(max_tokens="'100'")), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: max_tokens: expected an integer or a mapping of default, mlx, torch, "
         "toy, got '100'"]),
    "matrix validate: a loop_guard number": (
        {}, files(m__yaml=matrix(loop_guard="1.5")), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: loop_guard: expected 'MIN,MAX,REPEATS' or a mapping of min_period, "
         "max_period, repeats, got 1.5"]),
    "matrix validate: a prompt entry that is a number": (
        {}, files(m__yaml=matrix(prompts="[3]")), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: prompts[0]: expected a prompt name or a mapping with name and text, "
         "got 3"]),
    "matrix validate: an arm entry that is null": (
        {}, files(m__yaml=matrix(arms="[plain, null]")), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: arms[1]: expected an arm name or a mapping with arm: NAME and its "
         "options, got nothing (null)"]),
    "matrix validate: a duplicate engine": (  # it said "ok", engines in [toy, toy]
        {}, files(m__yaml=matrix(targets="{engines: [toy, toy]}")),
        ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: targets.engines[1]: duplicate engine 'toy' (list each once)"]),
    "matrix validate: a host no fleet could have": (
        {}, files(m__yaml=matrix(targets="{engines: [toy], hosts: ['bad host']}")),
        ["matrix", "validate", "{here}/m.yaml"],
        ["targets.hosts[0]: expected a host name of letters, digits", "got 'bad host'"]),
    # Its calibration failed once the embedded fleet started: "index out of range in self".
    "job calibrate: a round past the model's context, embedded": (
        {}, files(config__json='{"model_type": "gpt2", "n_positions": 48}'),
        ["job", "calibrate", "--model", "{here}", "--quick", "--embedded", "--db", "{db}"],
        ["--model {here}: a calibration round (--quick) needs 206 positions (prompt, steps, "
         "verify blocks), past its context of 48 tokens; expected a model of a longer context"]),
    "job calibrate: a host no fleet could have": (
        {}, NO_FILES, ["job", "calibrate", "--model", "smollm2-135m", "--host", "bad host",
                       "--address", "127.0.0.1:1", "--db", "{db}"],
        ["--host: expected a host name of letters, digits", "got 'bad host'"]),
    "fleet join: a blank --temp-dir": (
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--temp-dir", ""],
        ["--temp-dir '' is blank; expected a folder path"]),
    "replay: a policy twice": (
        {}, NO_FILES, ["replay", "{mid}", "--policy", "graded,gated,graded", "--costs",
                       "apple-m4pro", "--db", "{db}"],
        ["--policy lists graded twice; expected each policy once"]),
    "replay: --costs empty": (  # read as not given: each run's own host's calibration
        {}, NO_FILES, ["replay", "{mid}", "--costs", "", "--db", "{db}"],
        ["--costs '' is blank; expected a host, a YAML file or a packaged table name"]),
    # Each was read as a host name, refused only after the runs were read ("no YAML file,
    # packaged table or stored calibration of host ..."): a host name has no slash or .yaml.
    "replay: --costs a missing YAML file": (
        {}, NO_FILES, ["replay", "{mid}", "--costs", "{here}/nope.yaml", "--db", "{db}"],
        ["--costs {here}/nope.yaml: no such file; expected a YAML width-cost table"]),
    "replay: --costs a folder, no suffix": (
        {}, NO_FILES, ["replay", "{mid}", "--costs", "{here}", "--db", "{db}"],
        ["--costs {here}: is a directory; expected a YAML width-cost table"]),
    "replay: --costs an empty file": (  # it said field 'ratio' must be a list ...
        {}, files(c__yaml=""), REPLAY_COSTS,
        ["--costs {here}/c.yaml: the file is empty; expected a YAML width-cost table"]),
    "replay: --costs a list at the top": (
        {}, files(c__yaml="- 1.0\n- 1.5\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: expected a mapping of fields at the top level "
         "(name, ratio: [...]), got a list"]),
    "replay: --costs with a boolean cost": (
        {}, files(c__yaml="ratio: [true, 2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'ratio' must be a list of at least two positive costs"]),
    # Each was taken: an infinite cost predicted 0.000x, a field given twice let the last win.
    "replay: --costs with an infinite cost": (
        {}, files(c__yaml="ratio: [1.0, .inf]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'ratio' must be a list of at least two positive costs"]),
    "replay: --costs with ratio twice": (
        {}, files(c__yaml="ratio: [1.0, 1.2]\nratio: [1.0, 1.3]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: line 2, column 1: YAML syntax error: duplicate key 'ratio'"]),
    "replay: --costs with a list for its name": (
        {}, files(c__yaml="name: [a, b]\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'name' must be text, got a list"]),
    # Fields replay does not use were taken whatever they held.
    "replay: --costs with a negative step time": (
        {}, files(c__yaml="pipelined_ms: -1\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'pipelined_ms' must be a positive number of "
         "milliseconds, got -1"]),
    "replay: --costs with a cost of 1e308": (  # its sums overflowed: "inf / 15.0", 0.000x
        {}, files(c__yaml="ratio: [1.0, 1e308]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'ratio' must be a list of at least two positive costs",
         "each at most 1000); ratio[1] is 1e+308"]),
    "replay: --costs of an engine nobody runs": (  # taken and shown as if it were one
        {}, files(c__yaml="engine: foo\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'engine' is 'foo'; expected one of mlx, torch"]),
    "replay: --costs with a number for its name": (
        {}, files(c__yaml="name: 5\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'name' must be text, got "]),
    "replay: --costs with a list for its host": (
        {}, files(c__yaml="host: [a, b]\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'host' must be text, got a list"]),
    "replay: --costs with a cost of 5000 digits": (  # a ValueError traceback
        {}, files(c__yaml=f"ratio: [1.0, {'9' * 5000}]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: line 1, column 14: YAML syntax error: an integer of more than "
         "4300 digits; expected a shorter number"]),
    "replay: --costs nested 20000 deep": (  # a RecursionError traceback
        {}, files(c__yaml="ratio: " + "[" * 20000 + "]" * 20000 + "\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: nested too deeply"]),
    # Read whole, 200 MB of YAML took a minute and 500 MB of memory, then passed.
    "validate: a matrix file past 64 MiB": (
        {}, files(m__yaml="huge"), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: larger than 64 MiB, more than specfleet reads"]),
    "validate: two YAML documents": (  # it said only "but found another document"
        {}, files(m__yaml=GOOD + "---\nname: other\n"), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: line 6, column 1: YAML syntax error: a second document starts here; "
         "expected one document (no '---' after it)"]),
    "validate: a NUL byte in a matrix file": (
        {}, files(m__yaml=GOOD + "\0\n"), ["matrix", "validate", "{here}/m.yaml"],
        ["{here}/m.yaml: a NUL byte at byte 124, so not text"]),
    # An empty system turn was sent as given; --no-chat was refused once the model loaded.
    "generate: an empty --system-prompt": (
        {}, NO_FILES, ["generate", "-m", "smollm2-135m", "-p", "hi", "--system-prompt", ""],
        ["--system-prompt: expected the system turn's text, got a blank one"]),
    "generate: --system-prompt with --no-chat": (
        {}, NO_FILES, ["generate", "-m", "smollm2-135m", "-p", "hi", "--system-prompt", "x",
                       "--no-chat"],
        ["--system-prompt needs the chat template, and --no-chat was given; expected one of "
         "them"]),
    "generate: --prompt-file in UTF-16": (
        {}, files(p__txt="\xff\xfeh\0i\0"), ["generate", "-m", "smollm2-135m",
                                             "--prompt-file", "{here}/p.txt"],
        ["--prompt-file {here}/p.txt: not UTF-8 text (byte 0): it starts with a UTF-16 "
         "byte-order mark; expected a text file"]),
    "job generate: a NUL escaped in a prompt": (  # valid JSON; the job ran and stored it
        {}, files(b__jsonl='{"prompt": "a\\u0000b"}\n'), JOB_BATCH,
        ["{here}/b.jsonl: line 1: prompt: contains a NUL character; expected plain text"]),
    # A reading command: a mistyped --db made an empty store there before the refusal.
    "replay: --db a missing file": (
        {}, NO_FILES, ["replay", "{mid}", "--costs", "apple-m4pro", "--db", "{here}/typo.db"],
        ["--db: no store at {here}/typo.db"]),
    # The record's own files, checked before any is written: a folder was a traceback after
    # the plots were written, a named pipe hung the command.
    "report: a folder where runs.csv goes": (
        {}, files(runs__csv="dir"), REPORT_HERE,
        ["{here}/runs.csv: is a directory; expected a file to replace or nothing"]),
    "report: a named pipe where runs.csv goes": (
        {}, files(runs__csv="fifo"), REPORT_HERE,
        ["{here}/runs.csv: is a named pipe (FIFO); expected a file to replace or nothing"]),
    "job generate: a blank prompt": (  # it went to the fleet; generate -p ' ' is refused
        {}, files(b__jsonl='{"prompt": " \\n "}\n'), [*JOB_BATCH, "--address", "127.0.0.1:1"],
        ["{here}/b.jsonl: line 1: prompt: is blank; expected some text"]),
    "job generate: a prompt name twice": (  # it named neither line nor what was expected
        {}, files(b__jsonl='{"prompt": "hi"}\n{"prompt": "ho", "name": "line-1"}\n'), JOB_BATCH,
        ["{here}/b.jsonl: duplicate prompt name 'line-1' on lines 1 and 2; expected each name "
         "once (an unnamed line is line-N)"]),
    "job generate: a key twice on a line": (  # json let the last one win
        {}, files(b__jsonl='{"prompt": "a", "prompt": "b"}\n'), JOB_BATCH,
        ["{here}/b.jsonl: line 1: duplicate key 'prompt'; expected each field once"]),
    "job generate: a number of 5000 digits": (  # int()'s ValueError was a traceback
        {}, files(b__jsonl='{"prompt": "hi", "max_tokens": ' + "9" * 5000 + "}\n"), JOB_BATCH,
        ["{here}/b.jsonl: line 1: an integer of more than 4300 digits; expected a shorter "
         "number"]),
    "job generate: a line nested 100000 deep": (  # json's RecursionError was a traceback
        {}, files(b__jsonl='{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n"), JOB_BATCH,
        ["{here}/b.jsonl: line 1: nested too deeply; expected a flat JSON object"]),
    "job generate: a lookup flag with --policy plain": (  # plain drafts nothing: unused
        {}, files(b__jsonl='{"prompt": "hi"}\n'),
        [*JOB_BATCH, "--policy", "plain", "--prompt-lookup-ngram-max", "3"],
        ["--prompt-lookup-ngram-max given with --policy plain, which drafts nothing"]),
    "job generate: an unknown model, embedded": (  # it failed every run after Ray started
        {}, files(b__jsonl='{"prompt": "hi"}\n'),
        ["job", "generate", "--prompts", "{here}/b.jsonl", "--target", f"{HERE}/torch",
         "--model", "bogus", "--embedded", "--db", "{db}"],
        ["--model: torch: model 'bogus' is neither an alias"]),
    # Accepted where nothing needed the fleet (test_matrix_cli: a resume with all runs done).
    "validate: a malformed --address, toy models": (
        {}, NO_FILES, ["matrix", "validate", "{tmp}/good.yaml", "--address", "bad"],
        ["--address"]),
    # A pasted space made a second, empty store file beside the real one.
    "db upgrade: --db ends with a space": (
        {}, NO_FILES, ["db", "upgrade", "--db", "{tmp}/store.db "],
        ["--db: '{tmp}/store.db ' starts or ends with whitespace", "expected"]),
    "results: SPECFLEET_DB starts with a space": (
        {"SPECFLEET_DB": " {tmp}/store.db"}, NO_FILES, ["results"],
        ["SPECFLEET_DB: ' {tmp}/store.db' starts or ends with whitespace"]),
    "parity: --baseline is the matrix itself": (  # a check that could never fail
        {}, NO_FILES, ["parity", "{mid}", "--baseline", "{mid}", "--no-replay", "--db", "{db}"],
        ["--baseline and ID are both", "expected two different matrix ids"]),
    # Each ran with exit status 0, the fleet flags unread (a malformed one, both at once).
    "parity: --address with --no-replay": (
        {}, NO_FILES, ["parity", "{mid}", "--no-replay", "--address", "bad", "--db", "{db}"],
        ["--address picks the fleet that replays divergences, and --no-replay replays none; "
         "expected one of them"]),
    "parity: --embedded with --no-replay": (
        {}, NO_FILES, ["parity", "{mid}", "--no-replay", "--embedded", "--db", "{db}"],
        ["--embedded picks the fleet that replays divergences"]),
    "results: a model no stored run has": (  # a typo read as "0 runs"
        {}, NO_FILES, ["results", "--model", "Smollm2", "--db", "{db}"],
        ["--model: no stored run has 'Smollm2'", "expected one of the stored values: "]),
    "results: a host no stored run has": (
        {}, NO_FILES, ["results", "--host", "nosuch", "--cells", "--db", "{db}"],
        ["--host: no stored run has 'nosuch'", "expected one of the stored values: "]),
    # Moved to UTC, each is a moment before year 1 or after 9999: an OverflowError traceback.
    "results: --until before year 1 in UTC": (
        {}, NO_FILES, ["results", "--until", "0001-01-01T00:00+05:00", "--db", "{db}"],
        ["--until: '0001-01-01T00:00+05:00' falls outside years 1-9999 in UTC"]),
    "results: --since after year 9999 in UTC": (
        {}, NO_FILES, ["results", "--since", "9999-12-31T23:59-05:00", "--db", "{db}"],
        ["--since: '9999-12-31T23:59-05:00' falls outside years 1-9999 in UTC"]),
    # Ray refuses a label value that ends in '-', '_' or '.', or holds a newline: with
    # `--target h-/toy` a ValueError traceback once the embedded fleet had started.
    "job generate: SPECFLEET_HOST ending with '-'": (
        {"SPECFLEET_HOST": "h-"}, files(b__jsonl='{"prompt": "hi"}\n'),
        [*JOB_BATCH[:-4], "--target", "h/toy", "--model", "script:1ms", "--embedded", "--db",
         "{db}"],
        ["SPECFLEET_HOST: expected a host name of letters, digits, '_', '.' or '-', starting "
         "and ending with a letter or digit (at most 63), got 'h-'"]),
    "job generate: SPECFLEET_HOST ending with a newline": (
        {"SPECFLEET_HOST": "h\n"}, files(b__jsonl='{"prompt": "hi"}\n'),
        [*JOB_BATCH[:-4], "--target", "h/toy", "--model", "script:1ms", "--embedded", "--db",
         "{db}"], ["SPECFLEET_HOST: expected a host name", "got 'h\\n'"]),
    "fleet join: --name ending with '-'": (  # it went on to reach the head
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h-"],
        ["--name 'h-': expected 1-63 lower-case letters, digits, '-' or '_', starting and "
         "ending with a letter or digit"]),
    "fleet join: SPECFLEET_HOST in upper case": (  # it named --name, which was not given
        {"SPECFLEET_HOST": "Upper"}, NO_FILES, ["fleet", "join", "127.0.0.1:1"],
        ["$SPECFLEET_HOST 'Upper': expected 1-63 lower-case letters"]),
    # Ray's ValueError (temp_dir must be absolute) was a traceback as the embedded fleet
    # started, once the relative folder was made in the current one.
    "run: SPECFLEET_RUNTIME_DIR relative": (
        {"SPECFLEET_RUNTIME_DIR": "relative/rt"}, NO_FILES, run_args("{tmp}/good.yaml"),
        ["SPECFLEET_RUNTIME_DIR: 'relative/rt' is not an absolute path; expected a path "
         "starting with /"]),
    # Read as a file path: `db upgrade --db sqlite:` made a store named `sqlite:` here, exit 0.
    "db upgrade: a SQLite URL short of its //": (
        {}, NO_FILES, ["db", "upgrade", "--db", "sqlite:{here}/x.db"],
        ["--db: starts with 'sqlite:' but no '//' follows; expected sqlite:///PATH or "]),
    "SPECFLEET_DB: a PostgreSQL URL short of its //": (  # the password is not said
        {"SPECFLEET_DB": "postgresql:/u:s3cret@127.0.0.1:1/db"}, NO_FILES, ["matrix", "list"],
        ["SPECFLEET_DB: starts with 'postgresql:' but no '//' follows; expected "]),
    # Every toy run failed once the embedded fleet had started (IsADirectoryError), the
    # matrix of failures stored.
    "run: SPECFLEET_TOY_RUN_LOG a folder": (
        {"SPECFLEET_TOY_RUN_LOG": "{here}"}, NO_FILES, run_args("{tmp}/good.yaml"),
        ["SPECFLEET_TOY_RUN_LOG: {here} is a folder; expected a file to append run keys to"]),
    "run: SPECFLEET_TOY_RUN_LOG a named pipe": (  # every run waited on it until a timeout
        {"SPECFLEET_TOY_RUN_LOG": "{here}/log"}, files(log="fifo"), run_args("{tmp}/good.yaml"),
        ["SPECFLEET_TOY_RUN_LOG: {here}/log is no regular file (a named pipe or a device); "
         "expected a file to append run keys to"]),
    "run: SPECFLEET_TOY_RUN_LOG relative": (  # the worker appends from its own folder
        {"SPECFLEET_TOY_RUN_LOG": "runs.log"}, NO_FILES, run_args("{tmp}/good.yaml"),
        ["SPECFLEET_TOY_RUN_LOG: 'runs.log' is not an absolute path"]),
    # Each was taken: the blank or unprintable name titled the tables, a host no run can have
    # was compared with the runs' hosts.
    "replay: --costs with a blank name": (
        {}, files(c__yaml="name: '  '\nratio: [1.0, 1.2]\n"), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'name': '  ' is blank; expected the table's title in "
         "printable characters"]),
    "replay: --costs with a bidi override in its name": (
        {}, files(c__yaml='name: "gb10 \\u202e fast"\nratio: [1.0, 1.2]\n'), REPLAY_COSTS,
        ["field 'name': 'gb10 \\u202e fast' holds U+202E (RIGHT-TO-LEFT OVERRIDE), which "
         "does not print"]),
    "replay: --costs with a NUL in its host": (
        {}, files(c__yaml='host: "gb\\0"\nratio: [1.0, 1.2]\n'), REPLAY_COSTS,
        ["--costs {here}/c.yaml: field 'host': expected a host name of letters, digits",
         "got 'gb\\x00'"]),
    # Each tested (or offered) the engine once, as if listed once; `bench -e toy,toy` refuses.
    "selftest: an engine twice": (
        {}, NO_FILES, ["selftest", "--engine", "mlx,mlx"],
        ["--engine lists mlx twice; expected each engine once"]),
    "fleet join: an engine twice in --engines": (  # it went on to reach the head
        {}, NO_FILES, ["fleet", "join", "127.0.0.1:1", "--name", "h9", "--engines", "torch,torch"],
        ["--engines lists torch twice; expected each engine once"]),
    # A ValueError traceback ("embedded null byte") when the folder was looked at.
    # It listed no model, and every alias, the packaged ones too, was "neither an alias".
    "SPECFLEET_MODELS: no aliases": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml="models: {}\n"), ["models", "list"],
        ["SPECFLEET_MODELS {here}/m.yaml: models: is empty; expected at least one alias"]),
    "SPECFLEET_MODELS: a NUL in a source": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml='models: {x: {torch: "/a\\0b"}}\n'),
        ["models", "list"],
        ["models.x.torch: contains a NUL character; expected plain text"]),
    # Each listed as if it were `a`: the NUL went on into the store, the override reversed
    # what followed it on screen.
    "SPECFLEET_MODELS: a NUL in an alias": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"}, files(m__yaml='models: {"a\\0": {torch: bundled}}\n'),
        ["models", "list"],
        ["models: alias 'a\\x00' holds U+0000, which does not print; expected a name of "
         "printable characters"]),
    "SPECFLEET_MODELS: a bidi override in an alias": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml='models: {"a\\u202e": {torch: bundled}}\n'), ["models", "list"],
        ["models: alias 'a\\u202e' holds U+202E (RIGHT-TO-LEFT OVERRIDE)"]),
    # Aliases are looked up first: each silently won over the folder, repo or toy model.
    **{f"SPECFLEET_MODELS: an alias shaped like {what}": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml=f'models: {{"{alias}": {{torch: bundled}}}}\n'), ["models", "list"],
        [f"models: alias '{alias}' holds '/' or ':'; expected a name without either (-m reads "
         "those as a model folder, hf:ORG/NAME or script:)"])
       for what, alias in (("a folder", "models/x"), ("a repo", "hf:org/x"),
                           ("a toy model", "script:1ms"))},
    # Listed, then refused by every run: the store's model column is 256 characters wide.
    "SPECFLEET_MODELS: an alias too long for the store": (
        {"SPECFLEET_MODELS": "{here}/m.yaml"},
        files(m__yaml=f'models: {{"{"m" * 257}": {{torch: bundled}}}}\n'), ["models", "list"],
        ["has 257 characters; expected at most 256"]),
    "models list: SPECFLEET_HOME blank": (  # a folder named ' ' in the current folder
        {"SPECFLEET_HOME": " "}, NO_FILES, ["models", "list"],
        ["SPECFLEET_HOME: ' ' is blank; expected a path, or SPECFLEET_HOME unset for the user "
         "cache dir"]),
}


@pytest.mark.timeout(60)  # a named pipe opened for reading waits for a writer: fail, not hang
@pytest.mark.parametrize("case", sorted(NAMED))
def test_refusal_names_what_is_wrong(world, case) -> None:
    tmp, db, _ = world
    env, make, args, names = NAMED[case]
    if NOT_WRITABLE in [*args, *env.values()] and not Path("/proc/self").is_dir():
        pytest.skip("needs Linux /proc")
    here = tmp / "named" / case.replace(" ", "_").replace(":", "").replace(",", "")

    def fill(text: str) -> str:
        return text.replace("{here}", str(here)).replace("{tmp}", str(tmp))

    args = make(here, [fill(a) for a in args])
    with open_store(str(db), read_only=True) as store:
        matrices_before = [m.id for m in store.list_matrices()]
    result = check_case(world, args, {k: fill(v) for k, v in env.items()})
    assert result.exit_code == 2, result.stderr
    for name in names:
        assert fill(name) in result.stderr, result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    with open_store(str(db), read_only=True) as store:
        assert [m.id for m in store.list_matrices()] == matrices_before


# A path through a folder this user may not enter (mode 000): pathlib's checks raised
# PermissionError, a traceback in each. `{shut}` is that folder; root enters any folder, so
# these run in a process without the capabilities that let it.
SHUT = {
    "report: --out inside it": (
        {}, ["report", "{mid}", "--db", "{db}", "--out", "{shut}/r"],
        "--out: {shut}/r: cannot look inside {shut} (permission denied); expected a path"),
    "matrix list: --db inside it": (
        {}, ["matrix", "list", "--db", "{shut}/s.db"],
        "--db: {shut}/s.db: cannot look inside {shut} (permission denied)"),
    "db upgrade: --db inside it": (
        {}, ["db", "upgrade", "--db", "{shut}/s.db"], "--db: {shut}/s.db: cannot look inside"),
    "generate: a model folder inside it": (
        {}, ["generate", "-m", "{shut}/m", "-p", "hi"],
        "--model: model '{shut}/m': {shut}/m: cannot look inside {shut}"),
    "generate: the model folder itself": (
        {}, ["generate", "-m", "{shut}", "-p", "hi"],
        "{shut}/config.json: cannot look inside {shut}"),
    "models list: SPECFLEET_HOME is it": (
        {"SPECFLEET_HOME": "{shut}"}, ["models", "list"],
        "SPECFLEET_HOME: {shut} is a folder you may not enter (permission denied); expected a "
        "folder you may enter"),
    "run: SPECFLEET_JOURNAL_DIR inside it": (
        {"SPECFLEET_JOURNAL_DIR": "{shut}/j"},
        ["matrix", "run", "{tmp}/good.yaml", "--address", "127.0.0.1:1", "--db", "{db}"],
        "SPECFLEET_JOURNAL_DIR: {shut}/j: cannot look inside {shut}"),
    "validate: prompt_dir is it": (
        {}, ["matrix", "validate", "{shut}-prompts.yaml"],
        "no prompt 'story': cannot list prompt directory {shut} (Permission denied)"),
}
_NO_DAC = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c",
           'exec "$@"', "capsh"]


def _unprivileged(shut: Path) -> list[str] | None:
    """A command prefix under which `shut` (mode 000) cannot be entered, or None."""
    import shutil
    import subprocess

    prefix = _NO_DAC if os.geteuid() == 0 and shutil.which("capsh") else []
    if os.geteuid() == 0 and not prefix:
        return None
    probe = subprocess.run([*prefix, "ls", str(shut)], capture_output=True, check=False)
    return prefix if probe.returncode != 0 else None


# Reads one `[environment, arguments]` JSON line per call and answers `[exit status, stderr]`:
# each call runs `specfleet`'s entry point in a forked child, so a call is its own process
# without paying the CLI's import (~1 s) again.
_FORKED_CLI = r"""
import json, os, sys, tempfile, traceback
from specfleet.cli.entry import main
for line in sys.stdin:
    env, args = json.loads(line)
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.dup2(os.open(os.devnull, os.O_RDWR), 0)
                os.dup2(os.open(os.devnull, os.O_RDWR), 1)
                os.dup2(err.fileno(), 2)
                os.environ.update(env)
                sys.argv = ["specfleet", *args]
                main()
                status = 0
            except SystemExit as done:
                if isinstance(done.code, str):
                    print(done.code, file=sys.stderr)
                status = done.code if isinstance(done.code, int) else int(done.code is not None)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        err.seek(0)
        print(json.dumps([status, err.read().decode(errors="replace")]), flush=True)
"""


@pytest.fixture(scope="module")
def unprivileged_cli(tmp_path_factory):
    """`specfleet ARGS` run by a user who may not enter a mode-000 folder: a function of
    (environment, arguments) returning (exit status, stderr); None where no such user can be
    made (root without capsh)."""
    import subprocess
    import sys

    shut = tmp_path_factory.mktemp("probe") / "shut"
    shut.mkdir(mode=0o000)
    prefix = _unprivileged(shut)
    shut.chmod(0o700)
    if prefix is None:
        yield None
        return
    server = subprocess.Popen([*prefix, sys.executable, "-c", _FORKED_CLI],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None

    def call(env: dict[str, str], args: list[str]) -> tuple[int, str]:
        import json

        server.stdin.write(json.dumps([env, args]) + "\n")
        server.stdin.flush()
        status, stderr = json.loads(server.stdout.readline())
        return status, stderr

    yield call
    server.stdin.close()
    server.wait(timeout=60)


@pytest.mark.timeout(120)  # a call that hangs fails, as the subprocess's own timeout did
@pytest.mark.parametrize("case", sorted(SHUT))
def test_a_path_through_a_folder_one_may_not_enter(world, tmp_path, unprivileged_cli,
                                                    case) -> None:
    tmp, db, matrix_id = world
    shut = tmp_path / "shut"
    shut.mkdir(mode=0o000)
    (tmp_path / "shut-prompts.yaml").write_text(matrix(prompts="[story]",
                                                       prompt_dir=f"'{shut}'"))
    try:
        if unprivileged_cli is None:
            pytest.skip("root without capsh: every folder can be entered")
        env_given, args, said = SHUT[case]

        def fill(text: str) -> str:
            return (text.replace("{shut}", str(shut)).replace("{tmp}", str(tmp))
                    .replace("{db}", str(db)).replace("{mid}", matrix_id))

        before = snapshot(tmp)
        status, stderr = unprivileged_cli({k: fill(v) for k, v in env_given.items()},
                                          [fill(a) for a in args])
        assert status == 2, stderr
        (line,) = stderr.strip().splitlines()
        assert line.startswith("error: ") and fill(said) in line, line
        assert snapshot(tmp) == before
    finally:
        shut.chmod(0o700)


@pytest.mark.parametrize(("engine", "said"), [
    ("torch", "(Error while deserializing header: incomplete metadata"),
    ("mlx", "invalid data offsets (0, 16) exceeding the size of the file"),
])
def test_a_damaged_weights_file_is_one_line(tmp_path, engine, said) -> None:
    # A traceback from safetensors (torch) or MLX's reader. A whole header whose tensor runs
    # past the file's end (a cut download): only the library's read finds it. The weights'
    # hash is cached beside them before the load, as for any model folder: no snapshot here.
    header = b'{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text(WORD_TOKENIZER)
    (tmp_path / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(4))
    result = CliRunner().invoke(app, ["generate", "-m", str(tmp_path), "-p", "hi", "--engine",
                                      engine])
    assert result.exit_code == 2, (result.exception, result.stderr)
    (line,) = result.stderr.splitlines()
    assert f"{tmp_path}: the {engine} engine cannot load this folder" in line, line
    assert said in line, line


def test_a_config_without_the_fields_mlx_lm_requires_is_one_line(tmp_path) -> None:
    # mlx-lm's ModelArgs raised a TypeError traceback (GPT-2 saved by transformers 5 has no
    # n_ctx). Weights of one tensor: they are read before the config's fields are.
    header = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "tokenizer.json").write_text(WORD_TOKENIZER)
    (tmp_path / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(4))
    result = CliRunner().invoke(app, ["generate", "-m", str(tmp_path), "-p", "hi", "--engine",
                                      "mlx"])
    assert result.exit_code == 2, (result.exception, result.stderr)
    (line,) = result.stderr.splitlines()
    assert (f"{tmp_path}: the mlx engine cannot load this folder (ModelArgs.__init__() missing "
            "7 required positional arguments: 'n_ctx', ") in line, line


@pytest.mark.parametrize("args", [
    ["compare", "x" * 100_000, "y", "--db", "{db}"],  # our own message quoting the value
    ["job", "calibrate", "--model", "m", "--engine", "x" * 100_000],  # a usage error quoting it
])
def test_a_huge_value_is_quoted_with_its_middle_cut(world, args) -> None:
    (line,) = check_case(world, args).stderr.strip().splitlines()
    assert len(line) <= 1000 and "characters cut]" in line, line[:200]


def test_the_corpus_has_at_least_90_cases() -> None:
    assert len(FILES) + len(CALLS) + len(ENVS) >= 90


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                     st.text(max_size=20), st.sampled_from(["plain", "graded", "toy", "p"]))
_KEYS = st.one_of(st.sampled_from(["name", "models", "prompts", "arms", "repeats", "max_tokens",
                                   "temperature", "seed", "targets", "loop_guard", "text",
                                   "arm", "engines", "prompt_suffix", "prompt_dir"]),
                  st.text(max_size=8))
_YAML = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=30)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_YAML)
def test_random_yaml_never_tracebacks(tmp_path, data) -> None:
    path = tmp_path / "random.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    result = CliRunner().invoke(app, ["matrix", "validate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    assert result.exit_code in (0, 2), (result.exit_code, result.stderr)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert lines and all(line.startswith("error: ") for line in lines), result.stderr
