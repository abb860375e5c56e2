"""`specfleet matrix ...` and `specfleet job ...` on a real two-host Ray cluster.

(The driver-kill, double-resume and store-outage tests live in tests/cluster/test_faults.py.)
The bad-input table checks that every malformed file and call is one line, exit 2, store untouched.
"""

from __future__ import annotations

import json
import re
import sqlite3
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from tests.cluster.raycluster import start_fleet, workers
from tests.weights import EMPTY_SAFETENSORS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOY_MATRIX = """\
name: toy-cli
models: ["script:1ms"]
prompts:
  - {name: code, text: "def add(a, b):\\n    return a + b\\n"}
arms: [plain, graded]
repeats: 2
max_tokens: 12
targets: {engines: [toy]}
"""
GOOD_FIELDS = """\
models: ["script:1ms"]
prompts: [{name: p, text: "hello hello"}]
arms: [plain]
"""


@pytest.fixture(scope="module")
def fleet():
    cluster = start_fleet(("alpha", "beta"))
    workers(cluster)
    yield cluster
    cluster.shutdown()


@pytest.fixture
def db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    open_store(url).close()  # schema in place, so "untouched" compares rows, not tables
    return url


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def row_counts(url: str) -> dict[str, int]:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        tables = [r[0] for r in conn.execute("select name from sqlite_master where type='table'")]
        return {t: conn.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}


def test_matrix_run_status_list_and_validate(fleet, tmp_path, db):
    path = write(tmp_path, "toy.yaml", TOY_MATRIX)
    result = invoke("matrix", "run", path, "--address", fleet.address, "--db", db,
                    "--no-progress")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    # The tables alone on stdout (`> tables.txt`), what the run says on stderr.
    matrix_id = result.stderr.strip().splitlines()[-1].removeprefix("matrix id: ")
    assert f"\nmatrix {matrix_id}: done (8 done, 0 failed" in result.stderr
    assert result.stdout.lstrip().startswith(f"Matrix {matrix_id} (toy-cli)"), result.stdout
    assert "matrix id" not in result.stdout and "done (8 done" not in result.stdout
    with open_store(db) as store:
        rows = store.runs(matrix=matrix_id)
    assert len(rows) == 8 and {r.status for r in rows} == {"done"}
    assert {r.host for r in rows} == {"alpha", "beta"}
    assert row_counts(db)["hosts"] == 2  # both hosts recorded with their kind and versions
    status = invoke("matrix", "status", matrix_id, "--db", db)
    assert status.exit_code == 0
    assert status.stdout.splitlines()[1:] == ["  alpha/toy/cpu: 4 done", "  beta/toy/cpu: 4 done"]
    listing = invoke("matrix", "list", "--db", db)
    assert listing.stdout.split()[:4] == [matrix_id, "toy-cli", "done", "8/8"]
    both = invoke("matrix", "resume", matrix_id, "--embedded", "--address", "1.2.3.4:5",
                  "--db", db)  # refused although every run is done and no fleet would start
    assert both.exit_code == 2 and "--embedded and --address: give one of them" in both.stderr
    check = invoke("matrix", "validate", path)
    assert check.exit_code == 0 and "= 4 runs per target" in check.stdout
    schema = invoke("matrix", "schema")
    assert schema.exit_code == 0 and '"repeats"' in schema.stdout
    assert json.loads(schema.stdout)["title"] == "specfleet matrix"  # what editors validate


def test_without_a_terminal_each_finished_run_is_one_line_and_failures_are_summed(
        fleet, tmp_path, db):
    text = TOY_MATRIX.replace('models: ["script:1ms"]', 'models: ["script:1ms", fail]')
    result = invoke("matrix", "run", write(tmp_path, "mixed.yaml", text),
                    "--address", fleet.address, "--db", db)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == 16  # 2 models x 2 arms x 2 repeats on 2 hosts, one line each
    assert [ln.split("]")[0] for ln in lines] == [f"[{i}/16" for i in range(1, 17)]
    done = [ln for ln in lines if ln.endswith(" tok/s")]
    assert len(done) == 8 and all(" script:1ms code " in ln for ln in done)
    assert any(ln.startswith(("[1/16] alpha/toy ", "[1/16] beta/toy ")) for ln in lines[:1])
    assert sum(bool(re.search(r" fail code (plain|graded) rep [01]: failed: .*on purpose", ln))
               for ln in lines) == 8
    summary = [ln for ln in result.stderr.splitlines() if " runs failed: " in ln]
    assert len(summary) == 1 and summary[0].startswith("8 runs failed: ")
    assert "toy model failed on purpose" in summary[0]


def test_validate_in_a_fleet_asks_the_hosts_its_runs_go_to(fleet, tmp_path, monkeypatch):
    def folder(name: str, context: int) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(f'{{"max_position_embeddings": {context}}}')
        (tmp_path / name / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
        (tmp_path / name / "tokenizer.json").write_text("{}")
        return str(tmp_path / name)

    big, small = folder("big", 4096), folder("small", 8)
    # Only this process knows the alias `mine`: the hosts' workers started without it.
    registry = write(tmp_path, "models.yaml", f"models:\n  mine: {{torch: {big}}}\n")
    monkeypatch.setenv("SPECFLEET_MODELS", registry)
    matrix = ("name: v\nprompts: [{name: p, text: hi}]\narms: [plain]\nmax_tokens: 12\n"
              "targets: {engines: [torch]}\nmodels: ")
    three = write(tmp_path, "three.yaml", matrix + f"[{big}, {small}, mine]\n")
    asked = invoke("matrix", "validate", three, "--address", fleet.address)
    lines = asked.stderr.splitlines()
    assert (asked.exit_code, lines[0]) == (2, f"fleet: {fleet.address} (2 hosts)"), asked.stderr
    # What both hosts found is said once, not once per host.
    assert lines[1] == (f"error: {three}: models[1]: max_tokens 12 leaves no room for the "
                        "prompt in the model's context of 8 tokens")
    assert lines[2].startswith(f"error: {three}: models[2]: model 'mine' is neither an alias")
    assert len(lines) == 3
    here = invoke("matrix", "validate", three, "--local")  # this machine knows `mine`
    assert here.exit_code == 2 and here.stderr.count("\n") == 1 and "models[1]" in here.stderr
    one = write(tmp_path, "one.yaml", matrix + f"[{big}]\n")
    found = invoke("matrix", "validate", one, "--address", fleet.address)
    assert found.exit_code == 0, found.stderr
    assert found.stdout.endswith("; every model resolved on the hosts its runs go to "
                                 "(alpha, beta)\n")


def test_bench_runs_a_sweep_given_on_the_command_line(fleet, db):
    result = invoke("bench", "-m", "script:1ms", "-p", "story,edit_fn", "--arms", "plain",
                    "-a", "graded", "-r", "2", "-n", "8", "-e", "toy", "-o", "json",
                    "--address", fleet.address, "--db", db)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    body = json.loads(result.stdout)  # the tables alone on stdout
    cells = {(c["prompt"], c["arm"]) for c in body["cells"]}
    assert cells == {(p, a) for p in ("story", "edit_fn") for a in ("plain", "graded")}
    assert all(len(c["rates"]) == 2 for c in body["cells"])
    with open_store(db) as store:
        (matrix,) = [m for m in store.list_matrices() if m.id == body["matrix_id"]]
        assert matrix.name == "bench" and matrix.total_runs == 16  # 2 hosts x 2 x 2 x 2
    markdown = invoke("matrix", "show", body["matrix_id"], "-o", "md", "--db", db)
    assert markdown.stdout.startswith("## Matrix ")
    ran = invoke("bench", "-m", "script:1ms", "-p", "story", "-r", "1", "-n", "8", "-e", "toy",
                 "-o", "md", "--address", fleet.address, "--db", db)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert ran.stdout.startswith("## Matrix bench-")  # `> x.md` holds the markdown alone
    assert "matrix id: " in ran.stderr and "matrix id" not in ran.stdout
    assert ": done (" in ran.stderr and ": done (" not in ran.stdout
    bad = invoke("bench", "-p", "story,,edit_fn", "--db", db)
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --prompt: an empty name")


def test_job_generate_on_a_host_not_in_the_fleet_names_the_hosts_there(fleet, tmp_path, db):
    # It read "no target spark1/toy/cpu in the fleet (targets: none)": only spark1 was asked.
    batch = write(tmp_path, "b.jsonl", '{"prompt": "abc"}\n')
    result = invoke("job", "generate", "--prompts", batch, "--target", "spark1/toy/cpu",
                    "--model", "script:1ms", "--address", fleet.address, "--db", db)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines()[-1] == (
        "error: --target: no host spark1 in the fleet (hosts: alpha, beta); `specfleet fleet "
        "status` lists their targets")


def test_job_generate_stops_a_looping_reply_at_its_loop_guard(fleet, tmp_path, db):
    # The batch had no --loop-guard: a looping reply ran to its token limit (docs/trust.md).
    prompts = write(tmp_path, "loop.jsonl", '{"prompt": "abcabc"}\n')
    result = invoke("job", "generate", "--prompts", prompts, "--target", "beta/toy",
                    "--model", "script:1ms", "--max-tokens", "30", "--loop-guard", "3,3,3",
                    "--address", fleet.address, "--db", db, "--no-progress")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    job_id = result.stderr.strip().splitlines()[-1].split()[2]
    with open_store(db) as store:
        (run,) = store.runs(job=job_id)
    assert run.stop_reason == "loop_guard" and run.generated_tokens < 30
    assert run.loop_guard == {"min_period": 3, "max_period": 3, "repeats": 3}


def test_job_generate_and_calibrate(fleet, tmp_path, db):
    prompts = write(tmp_path, "batch.jsonl",
                    '{"name": "a", "prompt": "abcabc"}\n{"prompt": "xyzxyz", "max_tokens": 5}\n')
    result = invoke("job", "generate", "--prompts", prompts, "--target", "beta/toy",
                    "--model", "script:1ms", "--max-tokens", "9", "--policy", "calibrated",
                    "--prompt-lookup-ngram-max", "4", "--address", fleet.address,
                    "--db", db, "--no-progress")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "== a: 9 tokens" in result.stdout and "== line-2: 5 tokens" in result.stdout
    job_id = result.stderr.strip().splitlines()[-1].split()[2]  # the status goes to stderr
    assert "job id" not in result.stdout
    with open_store(db) as store:
        rows = store.runs(job=job_id)
    assert [(r.prompt_name, r.host, r.status) for r in rows] == [
        ("a", "beta", "done"), ("line-2", "beta", "done")]
    assert rows[0].output_text == "abcabcabc"  # the script model copies its prompt
    # The flags reach the worker; the max draft not given is the policy's own (32).
    assert {(r.lookup["ngram_max"], r.lookup["max_draft"]) for r in rows} == {(4, 32)}
    cal = invoke("job", "calibrate", "--model", "script", "--engine", "toy", "--max-width", "3",
                 "--address", fleet.address, "--db", db)
    assert cal.exit_code == 0, (cal.stdout, cal.stderr)
    with open_store(db) as store:
        costs = store.width_costs(engine="toy")
    assert sorted((c.host, c.width) for c in costs if c.model == "script") == [
        (h, w) for h in ("alpha", "beta") for w in (1, 2, 3)]
    # The calibrated batch found no table for its model on beta: it measured one and kept it.
    assert {(c.host, c.model) for c in costs if c.model != "script"} == {("beta", "script:1ms")}


def test_an_interrupted_job_is_stored_interrupted(fleet, tmp_path, db, monkeypatch):
    import specfleet.cli.job as job_cli

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(job_cli, "_dispatch", stopped)
    prompts = write(tmp_path, "batch.jsonl", '{"prompt": "abcabc"}\n')
    result = invoke("job", "generate", "--prompts", prompts, "--target", "beta/toy",
                    "--model", "script:1ms", "--address", fleet.address, "--db", db,
                    "--no-progress")
    assert result.exit_code != 0
    with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT status, finished_at FROM generation_jobs").fetchall()
    assert len(rows) == 1 and rows[0][0] == "interrupted" and rows[0][1] is not None


BAD_FILES = {
    "empty": "",
    "a list": "- a\n- b\n",
    "yaml syntax": "name: [unclosed\n",
    "no models": "name: m\nprompts: [p]\narms: [plain]\n",
    "bad name": "name: 'two words'\n" + GOOD_FIELDS,
    "unknown arm": "name: m\nmodels: [x]\nprompts: [{name: p, text: hi}]\narms: [turbo]\n",
    "zero repeats": "name: m\nrepeats: 0\n" + GOOD_FIELDS,
    "repeats as text": "name: m\nrepeats: '3'\n" + GOOD_FIELDS,
    "negative max_tokens": "name: m\nmax_tokens: -1\n" + GOOD_FIELDS,
    "unknown field": "name: m\ncolour: red\n" + GOOD_FIELDS,
    "negative temperature": "name: m\ntemperature: -1\n" + GOOD_FIELDS,
    "missing prompt file": "name: m\nmodels: [x]\nprompts: [nosuchprompt]\narms: [plain]\n",
    "bad loop guard": "name: m\nloop_guard: '1,2'\n" + GOOD_FIELDS,
    "unknown engine": "name: m\ntargets: {engines: [cuda]}\n" + GOOD_FIELDS,
    "duplicate key": "name: m\nname: n\n" + GOOD_FIELDS,
    "empty models": "name: m\nmodels: []\nprompts: [p]\narms: [plain]\n",
    "no target matches": "name: m\ntargets: {hosts: [nowhere], engines: [toy]}\n" + GOOD_FIELDS,
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_malformed_matrix_file_is_one_line_exit_2_store_untouched(fleet, tmp_path, db, case):
    path = write(tmp_path, "bad.yaml", BAD_FILES[case])
    before = row_counts(db)
    result = invoke("matrix", "run", path, "--address", fleet.address, "--db", db,
                    "--no-progress")
    assert_one_line_error(result)
    # The file, not the matrix's name: also for what is found once the fleet answers.
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {path}: "), result.stderr
    assert row_counts(db) == before


@pytest.mark.parametrize("command", [["matrix", "run"], ["parity", "run"]])
def test_a_plan_the_fleet_refuses_makes_no_new_store(fleet, tmp_path, command):
    # The store was made once the fleet answered, then the plan found no target.
    path = write(tmp_path, "m.yaml", "name: m\ntargets: {hosts: [nowhere], engines: [toy]}\n"
                 + GOOD_FIELDS.replace("[plain]", "[plain, graded]"))  # parity needs a pair
    new = tmp_path / "new.db"
    result = invoke(*command, path, "--address", fleet.address, "--db", f"sqlite:///{new}",
                    "--no-progress")
    assert_one_line_error(result)
    assert f"error: {path}: targets: no target matches" in result.stderr, result.stderr
    assert not new.exists()


def bad_calls(tmp_path: Path, address: str, db: str) -> dict[str, list[str]]:
    good = write(tmp_path, "good.yaml", "name: m\n" + GOOD_FIELDS)
    ok_batch = write(tmp_path, "ok.jsonl", '{"prompt": "hi"}\n')
    not_json = write(tmp_path, "bad.jsonl", "{prompt: hi}\n")
    gen = ["job", "generate", "--address", address, "--db", db, "--no-progress"]
    return {
        "no such file": ["matrix", "run", str(tmp_path / "nope.yaml"), "--db", db],
        "a directory": ["matrix", "run", str(tmp_path), "--db", db],
        "missing argument": ["matrix", "run"],
        "unknown option": ["matrix", "status", "x", "--bogus", "--db", db],
        "unknown matrix status": ["matrix", "status", "no-such-id", "--db", db],
        "unknown matrix resume": ["matrix", "resume", "no-such-id", "--db", db],
        "malformed address": ["matrix", "run", good, "--address", "nonsense", "--db", db],
        "closed port": ["matrix", "run", good, "--address", "127.0.0.1:9", "--db", db],
        "bad db scheme": ["matrix", "run", good, "--db", "foo://bar"],
        "list limit 0": ["matrix", "list", "--limit", "0", "--db", db],
        "validate bad": ["matrix", "validate",
                         write(tmp_path, "v.yaml", "name: m\nrepeats: 0\n"
                               "targets: {engines: [toy]}\n" + GOOD_FIELDS)],
        "prompts not json": [*gen, "--prompts", not_json, "--target", "alpha/toy"],
        "target without engine": [*gen, "--prompts", ok_batch, "--target", "alpha"],
        "zero max tokens": [*gen, "--prompts", ok_batch, "--target", "alpha/toy",
                            "--max-tokens", "0"],
        "unknown policy": [*gen, "--prompts", ok_batch, "--target", "alpha/toy",
                           "--policy", "turbo"],
        "unknown target host": [*gen, "--prompts", ok_batch, "--target", "nowhere/toy"],
        "calibrate engine": ["job", "calibrate", "--model", "x", "--engine", "gpu", "--db", db],
        "calibrate no model": ["job", "calibrate", "--db", db],
        # Each failed its runs one by one after the fleet started, and stored them.
        "unknown model on the host": [*gen, "--prompts", ok_batch, "--target", "alpha/toy",
                                      "--model", "turbo"],
        "calibrate unknown model": ["job", "calibrate", "--model", "turbo", "--engine", "toy",
                                    "--address", address, "--db", db],
    }


BAD_CALLS = ["no such file", "a directory", "missing argument", "unknown option",
             "unknown matrix status", "unknown matrix resume", "malformed address",
             "closed port", "bad db scheme", "list limit 0", "validate bad", "prompts not json",
             "target without engine", "zero max tokens", "unknown policy",
             "unknown target host", "calibrate engine", "calibrate no model",
             "unknown model on the host", "calibrate unknown model"]


@pytest.mark.parametrize("case", BAD_CALLS)
def test_a_bad_cli_call_is_one_line_exit_2_store_untouched(fleet, tmp_path, db, case):
    args = bad_calls(tmp_path, fleet.address, db)[case]
    before = row_counts(db)
    assert_one_line_error(invoke(*args))
    assert row_counts(db) == before


def assert_one_line_error(result) -> None:
    lines = result.stderr.strip().splitlines()
    if lines and lines[0].startswith("fleet: "):  # which fleet: said first (docs/fleet.md)
        lines = lines[1:]
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout


def test_the_matrix_file_example_in_this_module_is_valid(tmp_path):
    path = write(tmp_path, "toy.yaml", textwrap.dedent(TOY_MATRIX))
    assert invoke("matrix", "validate", path).exit_code == 0


def test_resume_says_which_host_of_the_matrix_is_not_in_the_fleet(fleet, db):
    # It ended "interrupted (0 done, ... 1 pending this call; 0.0 s)" and "resume with: ..."
    # without a word on why: the host its run belongs to is in no fleet this resume reached.
    from specfleet.jobs.run import RunSpec, Target

    spec = RunSpec(run_key="gone-000001/r", matrix_id="gone-000001",
                   target=Target(host="gamma", engine="toy", device="cpu"), model="script",
                   prompt_name="p", prompt_text="hello hello", arm="plain", max_tokens=8)
    with open_store(db) as store:
        store.create_matrix("gone", {"name": "gone"}, [spec], matrix_id="gone-000001")
        store.finish_matrix("gone-000001", "interrupted")
    result = invoke("matrix", "resume", "gone-000001", "--address", fleet.address, "--db", db,
                    "--wait", "1s", "--no-progress")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert ("gamma: not in this fleet (hosts: alpha, beta); its 1 run not done stays pending "
            "until a resume in a fleet that has gamma") in result.stderr.splitlines()
    with open_store(db) as store:
        assert [r.status for r in store.runs(matrix="gone-000001")] == ["pending"]


def test_run_and_resume_print_the_tables_asked_and_resume_says_what_it_mixes(
        fleet, tmp_path, db):
    # `run` and `resume` printed the terminal table whatever a script wanted (`bench` and
    # `show` took -o); a resume said nothing of the done runs it kept, timed by the driver
    # it took over from, whose host conditions may differ.
    from specfleet.jobs.plan import plan_runs
    from specfleet.jobs.run import Target
    from specfleet.jobs.spec_files import load_matrix_spec
    from tests.store.factory import result

    path = write(tmp_path, "toy.yaml", TOY_MATRIX)
    ran = invoke("matrix", "run", path, "--address", fleet.address, "--db", db,
                 "--no-progress", "-o", "json", "--rate", "decode")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert json.loads(ran.stdout)["rate"] == "decode"
    runs = plan_runs(load_matrix_spec(path), [Target(host=h, engine="toy", device="cpu")
                                              for h in ("alpha", "beta")], "cut-000001")
    with open_store(db) as store:
        store.create_matrix("toy-cli", {"name": "toy-cli"}, runs, matrix_id="cut-000001")
        store.claim_matrix("cut-000001", "box:1:cut", lease_s=0.001)  # a driver killed
        for run in runs[:4]:
            store.mark_running(run.run_key, "box:1:cut", lease_s=0.001)
            store.record_result(result(run))
    resumed = invoke("matrix", "resume", "cut-000001", "--address", fleet.address, "--db", db,
                     "--no-progress", "-o", "csv")
    assert resumed.exit_code == 0, (resumed.stdout, resumed.stderr)
    said = resumed.stderr.splitlines()
    assert "matrix cut-000001: resuming 4 of 8 runs (4 pending); 4 done kept" in said
    assert any(line.startswith(
        "matrix cut-000001: its cells mix runs timed in 2 sessions (4 runs 2026-11-01 "
        "12:00:00–12:00:01 UTC, 4 runs ") for line in said), said
    assert resumed.stdout.startswith("target,model,prompt,arm,"), resumed.stdout


def test_resume_in_a_fleet_refuses_a_model_its_host_lost(fleet, tmp_path, db):
    # Each run not done was sent to fail on the folder gone, and stored failed.
    from specfleet.jobs.run import RunSpec, Target

    gone = str(tmp_path / "moved")
    spec = RunSpec(run_key="lost-000001/r", matrix_id="lost-000001",
                   target=Target(host="alpha", engine="torch", device="cpu"), model=gone,
                   prompt_name="p", prompt_text="hello hello", arm="plain", max_tokens=8)
    with open_store(db) as store:
        store.create_matrix("lost", {"name": "lost"}, [spec], matrix_id="lost-000001")
        store.finish_matrix("lost-000001", "interrupted")
    result = invoke("matrix", "resume", "lost-000001", "--address", fleet.address, "--db", db)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    refused = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert refused[0].startswith(f"error: matrix lost-000001: host alpha, torch: model '{gone}'")
    with open_store(db) as store:
        assert [r.status for r in store.runs(matrix="lost-000001")] == ["pending"]
