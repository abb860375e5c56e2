"""Bad input nobody had tried: `SPECFLEET_*` values a worker would take without a word,
width-cost tables no host could have measured, and a `--costs` name that is a file here.
Each is one `error:` line, exit 2, nothing written (the corpus's `check_case`); beside them,
the near misses that must still pass (a BOM, CRLF, a falling width, 8 threads a CPU)."""

from __future__ import annotations

import pytest

from specfleet.errors import UserError
from specfleet.settings import CONDITIONS_ROOT, THREADS, check_worker_settings, logical_cpus
from tests.cli.test_bad_input import check_case, world  # noqa: F401 (a fixture)
from tests.report.test_predictions import db, invoke, matrix_id  # noqa: F401 (a fixture)

TOO_MANY_THREADS = str(8 * logical_cpus() + 1)


def test_threads_past_eight_a_cpu_are_refused_before_the_model_loads(world) -> None:  # noqa: F811
    # 4096 threads on 2 CPUs: 8 tokens ran past 2 minutes (6 s at 2 threads), not a word.
    result = check_case(world, ["generate", "-m", "smollm2-135m", "-p", "hi", "-n", "1",
                                "--engine", "torch"], {THREADS.name: TOO_MANY_THREADS})
    assert result.exit_code == 2
    assert (f"SPECFLEET_THREADS: {TOO_MANY_THREADS} threads on a machine of {logical_cpus()} "
            f"logical CPUs; expected at most {8 * logical_cpus()}") in result.stderr


def test_threads_up_to_eight_a_cpu_are_read() -> None:
    assert THREADS.read({THREADS.name: str(8 * logical_cpus())}) == 8 * logical_cpus()


@pytest.mark.parametrize(("root", "said"), [
    # The worker's readings were all missing, the runs stored as if measured on a quiet host.
    ("/nonexistent-specfleet-root", "SPECFLEET_CONDITIONS_ROOT: /nonexistent-specfleet-root is "
     "no folder; expected a tree laid out like / (sys/..., proc/meminfo)"),
    # Read by the worker in the runtime dir, not where the command ran.
    ("sim", "SPECFLEET_CONDITIONS_ROOT: 'sim' is not an absolute path"),
    ("{tmp}/afile", "SPECFLEET_CONDITIONS_ROOT: {tmp}/afile is no folder"),
])
def test_a_conditions_root_that_is_no_folder_is_refused(world, root, said):  # noqa: F811
    tmp = world[0]
    result = check_case(world, ["matrix", "run", str(tmp / "good.yaml"), "--embedded",
                                "--no-progress", "--db", "{db}"], {CONDITIONS_ROOT.name: root})
    assert result.exit_code == 2
    assert said.replace("{tmp}", str(tmp)) in result.stderr, result.stderr


def test_a_conditions_root_folder_passes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CONDITIONS_ROOT.name, str(tmp_path))
    # Empty, it passed: every reading missing, the runs stored as if on a quiet host.
    with pytest.raises(UserError, match=f"{tmp_path} holds neither proc/ nor sys/; expected a "
                                        r"tree laid out like / \(sys/\.\.\., proc/meminfo\)"):
        check_worker_settings()
    (tmp_path / "proc").mkdir()
    check_worker_settings()
    monkeypatch.setenv(CONDITIONS_ROOT.name, " ")
    with pytest.raises(UserError, match="is blank"):
        check_worker_settings()


@pytest.mark.parametrize(("ratio", "said"), [
    # Each priced a plain reply at "0.0 / 0.0" steps and predicted 1.000x or 0.640x.
    ("[1e-300, 1e-300]", "ratio[0] is 1e-300, under 0.1 of a pipelined step"),
    ("[0.001, 1.2, 1.3]", "ratio[0] is 0.001, under 0.1 of a pipelined step"),
    ("[1.0, 1.2, 0.05]", "ratio[2] is 0.05, under 0.1 of a pipelined step"),
])
def test_a_cost_under_a_tenth_of_a_step_is_refused(world, ratio, said) -> None:  # noqa: F811
    path = world[0] / "tables" / f"{abs(hash(ratio))}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"name: t\r\nratio: {ratio}\r\n")
    result = check_case(world, ["replay", "{mid}", "--costs", str(path), "--db", "{db}"])
    assert f"--costs {path}: {said}; expected each width's cost in pipelined one-token " \
           "steps" in result.stderr, result.stderr


def test_a_table_with_a_bom_and_crlf_and_a_falling_width_is_read(db, tmp_path) -> None:  # noqa: F811
    path = tmp_path / "t.yaml"  # real tables fall (GB10's 8B models at width 8)
    path.write_bytes(b"\xef\xbb\xbfname: t\r\nratio: [1.0, 2.0, 1.5, 0.1]\r\n")
    outcome = invoke("replay", matrix_id(db), "--costs", str(path), "--db", db)
    assert outcome.exit_code == 0, outcome.stderr
    assert "counters: 6 stored lookup runs replayed, 0 differ" in outcome.stdout


def test_a_costs_name_that_is_a_file_here_is_not_denied(db, tmp_path, monkeypatch):  # noqa: F811
    # It said "no YAML file, packaged table or stored calibration" of the file beside it.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mytable").write_text("ratio: [1.0, 1.2]\n")
    outcome = invoke("replay", matrix_id(db), "--costs", "mytable", "--db", db)
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stderr == (
        "error: --costs mytable: a name without '/', .yaml, .yml or .json is read as a host or a "
        "packaged "
        "table, and no such one has a table; expected ./mytable to read the file of that "
        "name\n")
    assert invoke("replay", matrix_id(db), "--costs", "./mytable", "--db", db).exit_code == 0
    # A file name's suffix in capitals is still a file's (it was looked up as a host).
    (tmp_path / "T.JSON").write_text('{"ratio": [1.0, 1.2]}\n')
    assert invoke("replay", matrix_id(db), "--costs", "T.JSON", "--db", db).exit_code == 0
