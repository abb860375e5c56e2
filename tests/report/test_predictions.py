"""`specfleet replay`: counters recomputed from stored greedy toy runs equal the stored ones;
predictions under a packaged table; one-line errors."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.jobs.run import RunSpec, Target
from specfleet.report.predictions import (
    cost_source,
    load_cost_file,
    predict,
    stored_runs,
    whole_run_key,
)
from specfleet.store.store import open_store
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker

TARGET = Target(host="box1", engine="toy", device="cpu")
PROMPTS = {"copy": "def add(a, b):\n    return a + b\n" * 2, "prose": "Once upon a time, far."}
ARMS = ("plain", "graded", "gated", "calibrated")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """A store with one toy matrix: two prompts x four arms, greedy, run by a real worker."""
    path = str(tmp_path_factory.mktemp("replay") / "replay.db")
    specs = [
        RunSpec(run_key=f"{prompt}-{arm}", target=TARGET, model="script", prompt_name=prompt,
                prompt_text=text, arm=arm, max_tokens=60)
        for prompt, text in PROMPTS.items() for arm in ARMS
    ]
    return run_by_a_worker(path, "replay", specs, str(tmp_path_factory.mktemp("lock")))


def run_by_a_worker(path: str, name: str, specs: list[RunSpec], lock_dir: str) -> str:
    """A matrix of `specs` run one by one by a real worker on host box1, stored in `path`."""
    lock = f"{lock_dir}/run.lock"
    worker = HostWorker(info=detect_host("box1"), sample_period_s=0.05, run_lock_path=lock)
    with open_store(path) as store:
        matrix_id = store.create_matrix(name, {}, specs)
        try:
            for spec in specs:
                store.record_result(worker.run(spec.model_copy(update={"matrix_id": matrix_id})))
        finally:
            worker.close()
    return path


def matrix_id(db: str) -> str:
    with open_store(db) as store:
        return store.list_matrices()[0].id


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_replayed_counters_equal_the_stored_runs_and_predictions_cover_each_policy(db):
    result = invoke("replay", matrix_id(db), "--costs", "gb10-qwen3-1.7b", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert "6 stored lookup runs replayed, 0 differ" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| script")]
    assert len(rows) == 2 * 3
    assert {row.split("|")[4].strip() for row in rows} == {"graded", "gated", "calibrated"}


def test_without_costs_each_run_is_replayed_under_its_own_hosts_table(db, tmp_path):
    # Not measured on box1 yet: one line saying so and how to measure it.
    result = invoke("replay", matrix_id(db), "--db", db)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "the runs' own host 'box1' has no stored calibration for " in result.stderr
    assert result.stderr.count("'box1'") == 1  # it named the host twice
    copy = str(tmp_path / "calibrated.db")
    shutil.copy(db, copy)
    worker = HostWorker(info=detect_host("box1"), sample_period_s=0.05,
                        run_lock_path=str(tmp_path / "run.lock"))
    try:
        calibration = worker.calibrate("script", "toy", "cpu", max_width=8, quick=True)
    finally:
        worker.close()
    with open_store(copy) as store:
        store.record_calibration(TARGET, "script", calibration)
    own = invoke("replay", matrix_id(copy), "--db", copy)
    assert own.exit_code == 0, own.stderr
    assert "under each run's own host" in own.stdout
    rows = [line.split("|") for line in own.stdout.splitlines() if line.startswith("| script")]
    assert len(rows) == 2 * 3 and {r[2].strip() for r in rows} == {"box1/toy/cpu"}
    # The same as naming the host.
    named = invoke("replay", matrix_id(copy), "--costs", "box1", "--db", copy)
    assert named.stdout.split("\n", 1)[1] == own.stdout.split("\n", 1)[1]


def test_a_prediction_for_a_run_arm_has_that_runs_counters(db, tmp_path):
    with open_store(db) as store:
        runs = stored_runs(store, matrix_id(db))
        predictions = predict(store, runs, ["graded", "gated"], cost_source("gb10-qwen3-8b"))
        own = tmp_path / "own.yaml"  # a table of the runs' own host
        own.write_text(f"host: {runs[0].host}\nratio: [1.0, 1.1, 1.2, 1.3]\n")
        here = predict(store, runs, ["graded"], cost_source(str(own)))
    stored = {(r.prompt_name, r.arm): r for r in runs}
    for p in predictions:
        run = stored[(p.cell[4], p.policy)]
        # Toy replies are identical across arms, so the prediction replays that very run.
        assert p.counters["proposed"] == run.proposed and p.counters["rounds"] == run.rounds
        # A GB10 table predicts a GB10: this host's measurement is no check of it.
        assert p.measured is None and p.error is None and p.predicted > 0
    assert here and all(p.measured is not None for p in here)


def test_one_run_key_replays_that_run_beside_its_cells_plain_run(db):
    # A lookup run's key was "no cell has a done greedy plain run to replay", after a read
    # of every run in the store.
    with open_store(db) as store:
        assert [r.run_key for r in stored_runs(store, "copy-graded")] == ["copy-graded",
                                                                           "copy-plain"]
        assert [r.run_key for r in stored_runs(store, "prose-plain")] == ["prose-plain"]
    result = invoke("replay", "copy-graded", "--costs", "apple-m4pro", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert "1 stored lookup run replayed, 0 differ" in result.stdout


def test_a_run_key_prefix_replays_the_one_run_it_begins(db):
    # `matrix status` shows 12 characters of a run key; replay took only the whole key.
    with open_store(db) as store:
        assert [r.run_key for r in stored_runs(store, "copy-gra")] == ["copy-graded",
                                                                        "copy-plain"]
        with pytest.raises(UserError, match="no matrix, generation job or run 'copy-gr'"):
            stored_runs(store, "copy-gr")  # shorter than MIN_RUN_KEY_PREFIX: no guess


def test_a_run_key_prefix_of_several_runs_asks_for_more():
    class Store:
        def runs(self, **filters):
            return []

        def run_keys_beginning(self, prefix, most):
            return ["abcdef12aa", "abcdef12bb", "abcdef12cc"][:most]

    with pytest.raises(UserError, match=r"^RUN_OR_MATRIX abcdef12: it begins several run keys "
                                        r"\(abcdef12aa, abcdef12bb, \.\.\.\); expected more"):
        whole_run_key(Store(), "abcdef12")


def test_bad_policy_costs_and_ident_are_one_line_errors(db, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ratio: [1.0]\n")
    cases = {
        ("--policy", "fast", "--costs", "apple-m4pro"): "--policy must list some of",
        ("--costs", str(bad)): "field 'ratio' must be a list",
        ("--costs", "nohost"): "no YAML file, packaged table or stored calibration",
        ("--costs", "nohost2"): "give --costs a packaged table: apple-m4pro, gb10-",  # named
    }
    for args, expected in cases.items():
        result = invoke("replay", matrix_id(db), *args, "--db", db)
        assert result.exit_code == 2, result.stdout
        assert len(result.stderr.splitlines()) == 1 and expected in result.stderr
    missing = invoke("replay", "nosuch", "--costs", "apple-m4pro", "--db", db)
    assert missing.exit_code == 2 and "no matrix, generation job or run" in missing.stderr
    assert missing.stderr.rstrip().endswith("expected an id that `specfleet matrix list` shows")
    short = invoke("replay", matrix_id(db)[:-1], "--costs", "apple-m4pro", "--db", db)
    assert f"(did you mean {matrix_id(db)!r}?)" in short.stderr, short.stderr  # as show says


@pytest.mark.parametrize(("ratio", "said"), [
    (f"[1.0, {'9' * 400}]", "; ratio[1] is 99999"),  # float() overflowed: a traceback
    ("[1.0, 1e99999]", "; ratio[1] is inf"),  # past float's range: the value is said
    ("[1.0, 1.0e3x]", "; ratio[1] is '1.0e3x'"),  # text: the value was not said
    ("[1.0]", ", got 1"),
])
def test_a_cost_that_is_no_positive_float_is_named(tmp_path, ratio, said):
    path = tmp_path / "c.yaml"
    path.write_text(f"ratio: {ratio}\n")
    with pytest.raises(UserError, match="field 'ratio' must be a list") as err:
        load_cost_file(path)
    assert said in str(err.value), str(err.value)


def test_oracle_prints_each_cells_bound_and_every_policys_efficiency(db):
    result = invoke("replay", matrix_id(db), "--costs", "apple-m4pro", "--oracle", "--db", db)
    assert result.exit_code == 0, result.stderr
    head = next(line for line in result.stdout.splitlines() if "| policy |" in line)
    assert head.endswith("| efficiency |")
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| script")]
    policy_rows = [r for r in rows if r[4].strip() in ("graded", "gated", "calibrated")]
    bound_rows = [r for r in rows if r[4].strip().startswith("n-gram")]
    assert len(policy_rows) == 2 * 3 and len(bound_rows) == 2
    assert all(0.0 < float(r[13]) <= 1.0 for r in policy_rows)
    # One bound per prompt, over the stored arms' own index and widest draft.
    assert {r[3].strip() for r in bound_rows} == set(PROMPTS)
    assert all(r[4].strip() == "n-gram 2-3, draft <= 7" for r in bound_rows)
    for r in bound_rows:
        oracle_steps, plain_steps = (float(x) for x in r[5].split("/"))
        best = max(float(p[10].strip().rstrip("x")) for p in policy_rows if p[3] == r[3])
        assert oracle_steps <= plain_steps and float(r[6].strip().rstrip("x")) >= best


def test_without_the_oracle_the_table_is_unchanged(db):
    result = invoke("replay", matrix_id(db), "--costs", "apple-m4pro", "--db", db)
    assert "efficiency" not in result.stdout and "Oracle bound" not in result.stdout


def test_the_oracle_flag_takes_no_value(db):
    result = invoke("replay", matrix_id(db), "--costs", "apple-m4pro", "--oracle=yes",
                    "--db", db)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and "--oracle" in result.stderr


def test_the_bound_covers_the_widest_draft_replayed(db):
    # Without a stored calibrated arm, calibrated replays with its default 32-token drafts:
    # the cell's one bound must weigh those too, or calibrated could beat it.
    with open_store(db) as store:
        runs = [r for r in stored_runs(store, matrix_id(db)) if r.arm != "calibrated"]
        predictions = predict(store, runs, ["graded", "calibrated"],
                              cost_source("gb10-qwen3-8b"), with_oracle=True)
    for prompt in PROMPTS:
        graded, calibrated = (p for p in predictions if p.cell[4] == prompt)
        assert graded.bound is calibrated.bound and graded.bound is not None
        assert graded.bound.lookup.max_draft == 32
        assert 0 < graded.efficiency <= 1.0 and 0 < calibrated.efficiency <= 1.0


def test_runs_an_earlier_revision_of_their_policy_made_are_not_compared(db, tmp_path):
    # A policy change makes its stored runs replay differently by design: `replay` said they
    # "differ" and exited 1. Runs without a revision (stored before revisions were) count as 1.
    import shutil

    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from specfleet.engine.calibrated import CalibratedGovernor
    from specfleet.store.tables import Run

    copy = str(tmp_path / "older.db")
    shutil.copy(db, copy)
    with open_store(copy) as store, Session(store.engine) as session:
        for run in session.query(Run).filter(Run.arm == "calibrated"):
            config = dict(run.engine_config)
            assert config.pop("policy_revision") == CalibratedGovernor.revision  # the current rule
            session.execute(update(Run).where(Run.run_key == run.run_key).values(
                engine_config=config, rounds=run.rounds + 5))
        session.commit()
    result = invoke("replay", matrix_id(copy), "--costs", "gb10-qwen3-1.7b", "--db", copy)
    assert result.exit_code == 0, result.stderr
    assert ("4 stored lookup runs replayed, 0 differ from the stored counters; 2 made by an "
            "earlier revision of their policy, not compared") in result.stdout
    with open_store(copy) as store, Session(store.engine) as session:  # the same rule: compared
        for run in session.query(Run).filter(Run.arm == "calibrated"):
            session.execute(update(Run).where(Run.run_key == run.run_key).values(
                engine_config={**run.engine_config,
                               "policy_revision": CalibratedGovernor.revision}))
        session.commit()
    result = invoke("replay", matrix_id(copy), "--costs", "gb10-qwen3-1.7b", "--db", copy)
    assert result.exit_code == 1
    assert "6 stored lookup runs replayed, 2 differ from the stored counters" in result.stdout


@pytest.mark.parametrize("pipelines", [True, False])
def test_a_stored_run_is_replayed_with_its_own_loop_re_feeds_and_pipelining(pipelines):
    """A recurrent model's rollback re-feeds kept tokens, which calibrated prices, and torch on
    a CPU does not pipeline: a replay that ignored either drafted otherwise than the run."""
    from types import SimpleNamespace

    from specfleet.engine.config import PromptLookupConfig, policy_revision
    from specfleet.engine.loop import generate
    from specfleet.engine.runners.toy import RecurrentInductionModel, lcg_tokens
    from specfleet.engine.stats import COUNTER_FIELDS
    from specfleet.report.predictions import check_counters

    class Recurrent(RecurrentInductionModel):
        engine = "toy" if pipelines else "torch"

    # Wide blocks cheap enough that calibrated drafts even with each re-feed priced in.
    lookup = PromptLookupConfig(max_draft=12, policy="calibrated",
                                costs=(1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4))
    runs, refed = [], 0
    for seed in range(1, 13):
        prompt = lcg_tokens(seed, 40, 6)
        live = generate(Recurrent(earliest=True), prompt, max_tokens=60, lookup=lookup)
        refed += live.stats.refed_tokens
        runs.append(SimpleNamespace(
            run_key=f"r{seed}", prompt_token_ids=prompt, token_ids=live.tokens,
            stop_reason=live.stop_reason, max_tokens=60, loop_guard=None,
            engine_config={"lookup": lookup.as_dict(), "rollback_kind": "refeed",
                           "pipelines": pipelines, "policy_revision": policy_revision(lookup)},
            **{name: getattr(live.stats, name) for name in COUNTER_FIELDS}))
    assert refed > 0  # the runs did re-feed
    assert check_counters(runs) == ([], 0)


def test_what_calibrate_json_prints_is_a_costs_file(tmp_path):
    # `replay --costs mine.json` refused calibrate's own output: "unknown field 'model'".
    import dataclasses

    from specfleet import jsontext
    from specfleet.engine.widthcosts import WidthCosts

    measured = WidthCosts(engine="torch", device="cpu", prompt_len=8, pipelined_ms=2.0,
                          sync_ms=(2.0, 3.0, 4.0), ratio=(1.0, 1.5, 2.0), n=2, flagged=(3,))
    path = tmp_path / "mine.json"
    path.write_text(jsontext.dumps({"model": "smollm2-135m", **dataclasses.asdict(measured)}))
    table = cost_source(str(path))(None, None)
    assert table.name == "mine" and table.ratio == (1.0, 1.5, 2.0)
    bare = tmp_path / "bare.json"  # a .json name alone is a file too, not a host
    shutil.copy(path, bare)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert cost_source("bare.json")(None, None).ratio == (1.0, 1.5, 2.0)


def test_a_run_with_a_lookup_setting_this_specfleet_lacks_is_one_line():
    # A newer specfleet's setting in engine_config was a TypeError traceback.
    from types import SimpleNamespace

    from specfleet.report.predictions import stored_lookup

    run = SimpleNamespace(run_key="r1", engine_config={"lookup": {"ngram_max": 3, "bogus": 1}})
    with pytest.raises(UserError, match=r"^run r1 drafted with a setting this specfleet does "
                                        r"not know \(bogus\); expected .* upgrade specfleet"):
        stored_lookup(run)
    run.engine_config = {"lookup": {"ngram_max": 3, "ngram_min": 2}}
    assert stored_lookup(run).ngram_max == 3
