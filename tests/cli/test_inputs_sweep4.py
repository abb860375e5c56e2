"""Bad input of kinds the earlier sweeps left out: an option that takes one value given
twice, an integer past int()'s 4300 digits, a name past a file name's 255 bytes, and a
`generate --db` no policy of the reply reads. Each is one `error:` line, exit 2, no
traceback, nothing written (the corpus's `check_case`)."""

from __future__ import annotations

import pytest

from tests.cli.test_bad_input import check_case, world  # noqa: F401 (a fixture)

GENERATE = ["generate", "-m", "smollm2-135m", "-p", "hi"]


def refused(world, args: list[str], said: str) -> None:  # noqa: F811
    tmp = world[0]
    result = check_case(world, [a.replace("{tmp}", str(tmp)) for a in args])
    assert result.exit_code == 2
    assert said in result.stderr, result.stderr


@pytest.mark.parametrize(("args", "said"), [
    # Each ran with the last value and not a word: `--db` upgraded the second store.
    (["db", "upgrade", "--db", "{db}", "--db", "{tmp}/second.db"],
     "error: specfleet db upgrade: --db given twice (the last would win without a word); "
     "expected it once"),
    (["generate", "-m", "smollm2-135m", "--model", "gemma3-270m", "-p", "hi"],
     "specfleet generate: --model given twice"),
    ([*GENERATE, "--chat", "--no-chat"], "--chat/--no-chat given twice"),
    (["matrix", "list", "--limit", "1", "--limit", "5", "--db", "{db}"],
     "specfleet matrix list: --limit given twice"),
    (["job", "show", "x", "--db", "{db}", "--db", "{db}", "--db", "{db}"], "--db given 3 times"),
])
def test_an_option_of_one_value_given_twice_is_refused(world, args, said) -> None:  # noqa: F811
    refused(world, args, said)


def test_an_option_of_many_values_may_repeat(world) -> None:  # noqa: F811
    result = check_case(world, ["replay", "{mid}", "--policy", "graded", "--policy", "gated",
                                "--db", "{db}"])
    assert "given twice" not in result.stderr and "no done greedy run" in result.stderr


@pytest.mark.parametrize(("args", "said"), [
    # pydantic said only "exceeded maximum size": nothing of what is expected.
    ([*GENERATE, "-n", "9" * 5000],
     "'--max-tokens' / '-n': a number of 5000 digits; expected a number <= 131072"),
    ([*GENERATE, "-n", "-" + "9" * 5000], "a number of 5000 digits; expected a number >= 1"),
    (["serve", "--port", "9" * 4301, "--db", "{db}"],
     "'--port': a number of 4301 digits; expected a number <= 65535"),
    (["bench", "-r", "9" * 5000], "'--repeats' / '-r': a number of 5000 digits; expected a "
     "whole number of at most 4300 digits"),
])
def test_an_integer_past_what_int_reads_says_what_is_expected(world, args, said):  # noqa: F811
    refused(world, args, said)


@pytest.mark.parametrize(("name", "size"), [("x" * 300, 300), ("ü" * 130, 260)])
def test_a_costs_name_past_a_file_names_bytes_is_one_line(world, name, size):  # noqa: F811
    # Looked up as NAME.yaml among the packaged tables: an OSError traceback.
    refused(world, ["replay", "{mid}", "--costs", name, "--db", "{db}"],
            f"...: a name of {size} bytes, which no host or packaged table has; expected a "
            "host, a YAML file or a packaged table name")


@pytest.mark.parametrize("lookup", [
    [], ["--prompt-lookup"], ["--prompt-lookup", "--prompt-lookup-policy", "gated"],
    ["--prompt-lookup", "--prompt-lookup-no-adaptive"],
])
def test_a_store_no_policy_of_the_reply_reads_is_refused(world, lookup) -> None:  # noqa: F811
    # The reply ran and the store went unread: a mistyped --db (or a missing one) unsaid.
    refused(world, [*GENERATE, *lookup, "--db", "{tmp}/typo.db"],
            "error: --db: only the calibrated policy reads the store (its width-cost table), "
            "and this reply would not; expected --prompt-lookup --prompt-lookup-policy "
            "calibrated beside --db, or no --db")


@pytest.mark.parametrize("policy", ["calibrated", "gated", "auto"])
def test_a_policy_beside_a_fixed_draft_length_is_refused(world, policy) -> None:  # noqa: F811
    # The policy went unused without a word (no table read or measured, exit 0), and beside
    # --db the refusal asked for the very flags given.
    for db in ([], ["--db", "{tmp}/typo.db"]):
        refused(world, [*GENERATE, "--prompt-lookup", "--prompt-lookup-policy", policy,
                        "--prompt-lookup-no-adaptive", *db],
                f"error: --prompt-lookup-policy {policy} given with --prompt-lookup-no-adaptive "
                "(every round drafts max-draft tokens: no policy decides); expected one of them")


def test_calibrate_store_reads_the_host_name_before_measuring(world) -> None:  # noqa: F811
    # The table is stored under this host's name: a bad SPECFLEET_HOST was said after the
    # whole measurement, its table printed and the exit 2.
    result = check_case(world, ["calibrate", "-m", "smollm2-135m", "--quick", "--store",
                                "--db", f"{world[0]}/calibrate-host.db"],
                        {"SPECFLEET_HOST": "bad host!"})
    assert result.stdout == ""
    assert result.stderr.startswith("error: SPECFLEET_HOST: expected a host name"), result.stderr


@pytest.mark.parametrize(("model", "said"), [
    # An OSError traceback (File name too long) once the embedded fleet had started.
    ("m" * 300, "--model: must be at most 256 characters, got 'mmm"),
    # Said by the fleet's workers, after the embedded fleet started (a minute here).
    ("nosuch", "model 'nosuch' is neither an alias"),
])
def test_job_calibrate_refuses_a_model_before_the_embedded_fleet(world, model, said):  # noqa: F811
    refused(world, ["job", "calibrate", "--model", model, "--embedded", "--db", "{db}"], said)


@pytest.mark.parametrize("model", ["m" * 256, "ü" * 200])
def test_a_model_name_past_a_file_names_bytes_is_one_line(world, model) -> None:  # noqa: F811
    # Within the store's 256 characters, past a file name's 255 bytes: an OSError traceback
    # (File name too long) from `matrix validate`, `matrix run`, `bench` and `job calibrate`.
    path = world[0] / "cases" / f"long-model-{len(model)}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"name: m\nmodels: ['{model}']\nprompts: [story]\narms: [plain]\n")
    refused(world, ["matrix", "validate", str(path)], f"models[0]: model '{model[:30]}")
    refused(world, ["bench", "-m", model, "-p", "story", "--embedded", "--db", "{db}"],
            f"model '{model[:30]}")


@pytest.mark.parametrize(("args", "said"), [
    # Read as 11 by int(): `compare` passed at a 11x threshold where 1.1 failed it.
    (["compare", "{mid}", "{mid}", "--factor", "1_1", "--db", "{db}"],
     "'--factor': '1_1' is no plain number (digits grouped with '_'); expected digits only"),
    (["results", "--limit", "1_0", "--db", "{db}"], "'--limit': '1_0' is no plain number"),
    (["serve", "--port", "80_80"], "'--port': '80_80' is no plain number"),
    ([*GENERATE, "-n", "0b11"], "'0b11' is no plain number (a base prefix)"),
    (["bench", "-m", "script:1ms", "-e", "toy", "-p", "story", "-r", "0x3", "--db", "{db}"],
     "'0x3' is no plain number (a base prefix)"),
])
@pytest.mark.timeout(60)  # unrefused, `serve` would serve on port 8080 until stopped
def test_a_number_written_another_way_than_digits_is_refused(world, args, said):  # noqa: F811
    refused(world, args, said)


def test_bench_says_a_bare_folder_counts_from_the_current_one(world, tmp_path, monkeypatch):  # noqa: F811
    # bench has no matrix file, yet it said "(a folder counts from the matrix file's)".
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    refused(world, ["bench", "-m", "adir", "-p", "story", "-e", "torch", "--db", "{db}"],
            "error: bench: --model adir: 'adir' is no alias but a folder here; expected ./adir "
            "(a folder counts from the current one) or an alias")
