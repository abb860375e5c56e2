"""`specfleet generate` / `specfleet calibrate` through the real Typer app (spec 9).

Flag errors run without a model. The rest drive the bundled SmolLM2-135M on the torch
engine (fetched once into the user cache by `specfleet models fetch smollm2-135m`).
"""

from __future__ import annotations

import json
import os
import re

# Before torch loads: on a shared 2-core host, spinning OpenMP workers made every torch
# forward here 5-10x slower under load (width-1 step 60 ms -> 450-1000 ms).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from specfleet.cli.generate import check_context, encode  # noqa: E402
from specfleet.cli.main import app  # noqa: E402
from specfleet.configs import prompts_dir  # noqa: E402
from specfleet.errors import UserError  # noqa: E402

MODEL = "smollm2-135m"
# A prompt the bundled model answers by copying: prompt lookup has something to draft.
EDIT_PROMPT = (
    "Return this Python function unchanged:\n\n"
    "def total(prices):\n    result = 0\n    for price in prices:\n"
    "        result = result + price\n    return result\n"
)
# The bundled model answers this with one greeting line (8 tokens) repeated until stopped.
LOOPING_PROMPT = (
    "Write a short, friendly email from Alex to his colleague Sam. Alex asks to move their "
    "Thursday planning meeting to Friday afternoon, because a customer is visiting on "
    'Thursday. Keep it under 150 words and sign it "Alex".'
)
SUMMARY_RE = re.compile(
    r"^\[Prompt lookup\] rounds=\d+ drafted_rounds=\d+ paused_rounds=\d+ proposed=\d+ "
    r"accepted=\d+ acceptance_rate=\d+\.\d{4} tokens_per_forward=\d+\.\d{4} "
    r"shadow_confirmations=\d+$"
)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def generate_json(*args: str) -> dict:
    result = invoke(
        "generate", "-m", MODEL, "--engine", "torch", "--device", "cpu", "--json", *args
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def bundled_model() -> str:
    from specfleet.models.bundled import fetch_bundled
    from specfleet.models.registry import resolve_model

    fetch_bundled()
    return str(resolve_model(MODEL, "torch").path)


def looping_prompt() -> str:
    path = prompts_dir() / "looping.txt"
    return path.read_text() if path.is_file() else LOOPING_PROMPT


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--prompt-lookup-ngram-min", "0"], "--prompt-lookup-ngram-min must be at least 1"),
        (
            ["--prompt-lookup-ngram-min", "3", "--prompt-lookup-ngram-max", "2"],
            "--prompt-lookup-ngram-max (2) must be >= ngram-min (3)",
        ),
        (["--prompt-lookup-ngram-max", "17"], "--prompt-lookup-ngram-max (17) must be at most 16"),
        (["--prompt-lookup-max-draft", "0"], "--prompt-lookup-max-draft must be at least 1"),
        (["--prompt-lookup-max-draft", "65"], "--prompt-lookup-max-draft (65) must be at most 64"),
        (["--prompt-lookup-policy", "eager"],
         "'--prompt-lookup-policy': 'eager' is not one of 'auto', 'graded', 'gated'"),
        # Plain decoding with lookup settings: they went unused, the exit 0.
        (["--prompt-lookup-max-draft", "3"],
         "--prompt-lookup-max-draft given without --prompt-lookup; expected --prompt-lookup"),
        (["--prompt-lookup-policy", "graded", "--prompt-lookup-no-adaptive"],
         "--prompt-lookup-policy, --prompt-lookup-no-adaptive given without --prompt-lookup"),
        (["--prompt-lookup-ngram-min", "1"], "--prompt-lookup-ngram-min given without"),
        # Typed at their defaults: still settings plain decoding ignores.
        (["--prompt-lookup-ngram-max", "3"], "--prompt-lookup-ngram-max given without"),
        (["--prompt-lookup-policy", "auto"], "--prompt-lookup-policy given without"),
        # Only ngram-min given: ngram-max is at its default, so ngram-min is the one at fault.
        (["--prompt-lookup", "--prompt-lookup-ngram-min", "4"],
         "--prompt-lookup-ngram-min (4) must be <= ngram-max (3, its default); expected "
         "--prompt-lookup-ngram-min 3 or less, or --prompt-lookup-ngram-max beside it"),
        (["--seed", "5"], "--seed given with --temp 0 (greedy: nothing is drawn at random); "
         "expected --temp above 0"),
        # The store of width-cost tables: refused before the model loads.
        (["--db", "mysql://u@h/x"], "--db: unsupported database scheme 'mysql'; expected"),
        (["--loop-guard", "3,2,8"], "--loop-guard expects MIN,MAX,REPEATS"),
        (["--loop-guard", "1,2"], "--loop-guard expects MIN,MAX,REPEATS"),
        (["--loop-guard", "a,b,c"], "--loop-guard expects MIN,MAX,REPEATS"),
        (["--loop-guard", "1,4,1"], "REPEATS >= 2"),
        (["--max-tokens", "0"], "'--max-tokens' / '-n': expected a number >= 1"),
        (["--seed", "-1"], "'--seed': expected a number >= 0"),
        (["--temp", "-1"], "--temp -1.0: expected a number from 0 to"),
        (["--engine", "jax"], "'--engine': 'jax' is not one of 'mlx', 'torch'"),
        (["--device", "tpu"], "'--device': 'tpu' is not one of 'auto', 'metal'"),
        # The devices this host's torch can use follow (on a CUDA host, cuda too).
        (["--engine", "torch", "--device", "metal"],
         "--device metal: the torch engine cannot use it; expected auto"),
    ],
)
def test_a_bad_flag_is_one_line_naming_the_flag_and_exit_2(args, expected):
    result = invoke("generate", "-m", MODEL, "-p", "hi", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]


def test_chat_asked_of_a_model_without_a_chat_template_is_refused():
    plain = SimpleNamespace(tokenizer=SimpleNamespace(chat_template=None),
                            encode_prompt=lambda text, chat: [7, 8])
    with pytest.raises(UserError, match=r"^--chat needs the chat template \(this model has none\); "
                       r"expected no --chat"):
        encode(plain, "hi", chat=True)
    assert encode(plain, "hi", chat=None) == [7, 8]  # not asked for: plain text, as documented


@pytest.mark.parametrize(("prompt_tokens", "max_tokens", "expected"), [
    (64, 1, "--prompt-file: the prompt is 64 tokens, too long for tiny's context of 64 tokens; "
            "expected a prompt of at most 63 tokens (room for the reply)"),
    (50, 20, "--max-tokens: the prompt is 50 tokens and --max-tokens 20; together they exceed "
             "tiny's context of 64 tokens; expected --max-tokens 14 or less"),
])
def test_a_reply_past_the_context_names_what_is_too_long(
    tmp_path, prompt_tokens, max_tokens, expected
):
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 64}')
    loaded = SimpleNamespace(path=str(tmp_path), alias="tiny")
    check_context(loaded, 50, 14, "--prompt-file")  # fits exactly
    with pytest.raises(UserError) as err:
        check_context(loaded, prompt_tokens, max_tokens, "--prompt-file")
    assert str(err.value) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-m", "/no/such/model/folder", "-p", "hi"], "--model: model '/no/such/model/folder'"),
        (["-m", MODEL, "-p", "   "], "--prompt"),
        (["-m", MODEL], "--prompt"),
        (["-m", MODEL, "--prompt-file", "/no/such/prompt.txt"], "--prompt-file"),
        (["-m", MODEL, "-p", "hi", "--prompt-file", "/no/such/prompt.txt"], "not both"),
        (["-m", MODEL, "--prompt-file", "nosuch"], "(or a packaged prompt: edit_fn, edit_json"),
        (["-m", MODEL, "-p", "-"], "--prompt: the prompt is empty"),  # stdin is empty
    ],
)
def test_a_missing_model_or_prompt_is_one_line_and_exit_2(args, expected):
    result = invoke("generate", "--engine", "torch", *args)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected in lines[0]


@pytest.mark.parametrize(("stdin", "expected"), [
    # Python read a pipe's stray bytes as surrogates: the tokenizer's TypeError, a traceback.
    (b"caf\xe9", "--prompt -: not UTF-8 text (byte 3); expected UTF-8 text"),
    (b"\xff\xfeh\x00i\x00", "--prompt -: not UTF-8 text (byte 0): it starts with a UTF-16"),
    (b"a\x00b", "--prompt -: a NUL byte at byte 1, so not text"),
])
def test_standard_input_that_is_not_utf8_text_is_one_line(stdin, expected):
    result = CliRunner().invoke(app, ["generate", "--engine", "torch", "-m", MODEL, "-p", "-"],
                                input=stdin)
    assert result.exit_code == 2, (result.exception, result.stderr)
    assert result.stdout == "" and result.stderr.startswith(f"error: {expected}"), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_reply_cut_by_ctrl_c_ends_its_line_before_interrupted(monkeypatch):
    # The partial reply had no newline: a terminal showed "...companionshipinterrupted".
    import specfleet.cli.generate as generate_cli

    def cut_short(loaded, request, *, stream, **_):
        stream([1, 2])
        raise KeyboardInterrupt

    loaded = SimpleNamespace(runner=SimpleNamespace(decode=lambda ids: "Cats are"))
    monkeypatch.setattr(generate_cli, "load_model", lambda *args: loaded)
    monkeypatch.setattr(generate_cli, "run_generation", cut_short)
    result = invoke("generate", "-m", MODEL, "-p", "hi")
    assert result.exit_code == 130, (result.exception, result.stderr)
    assert (result.stdout, result.stderr) == ("Cats are\n", "interrupted\n")


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--max-width", "0", "a number >= 1"),
        ("--max-width", "66", "a number <= 65"),
        ("--steps", "1", "a number >= 2"),
        ("--rounds", "0", "a number >= 1"),
    ],
)
def test_calibrate_refuses_bad_counts_in_one_line(flag, value, expected):
    result = invoke("calibrate", "-m", MODEL, flag, value)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: specfleet calibrate: Invalid value for '{flag}': expected {expected}; "
        f"got '{value}'"]  # typer's message leaves the refused value out


@pytest.mark.slow
@pytest.mark.torch
def test_json_shape_and_lookup_reply_identical_to_plain(bundled_model):
    plain = generate_json("-p", EDIT_PROMPT, "-n", "40")
    lookup = generate_json("-p", EDIT_PROMPT, "-n", "40", "--prompt-lookup", "--trace")
    assert set(plain) >= {
        "text",
        "token_ids",
        "prompt_tokens",
        "generated_tokens",
        "stop_reason",
        "timings",
        "tok_per_s",
        "counters",
        "prompt_lookup",
        "model",
        "engine",
        "device",
        "loop_share",
    }
    assert "trace" not in plain  # only with --trace
    assert plain["prompt_lookup"] is None and plain["summary_line"] is None
    assert plain["sampler"] == {"temperature": 0.0, "seed": None}  # greedy, said
    assert set(plain["timings"]) == {"prefill_s", "decode_s", "total_s", "warmup_s"}
    generated = plain["generated_tokens"]
    assert generated == len(plain["token_ids"]) > 20
    assert plain["stop_reason"] == ("max_tokens" if generated == 40 else "eos")
    assert plain["timings"]["total_s"] > 0 and plain["timings"]["warmup_s"] > 0
    assert plain["tok_per_s"] == pytest.approx(generated / plain["timings"]["total_s"])
    assert (plain["engine"], plain["device"], plain["model"]["alias"]) == ("torch", "cpu", MODEL)
    # Prompt lookup drafts from the copied function and still emits plain's exact reply.
    assert lookup["token_ids"] == plain["token_ids"]
    assert lookup["text"] == plain["text"]
    assert lookup["prompt_lookup"]["policy"] == "graded"  # auto on a CPU host
    counters = lookup["counters"]
    assert counters["drafted_rounds"] > 0 and counters["accepted"] > 0
    assert SUMMARY_RE.match(lookup["summary_line"])
    kinds = {row["kind"] for row in lookup["trace"]}
    assert "verify" in kinds
    # The prefill token is emitted before the first round.
    assert sum(row["emitted"] for row in lookup["trace"]) == generated - 1


@pytest.mark.slow
@pytest.mark.torch
def test_text_mode_prints_reply_generated_line_and_summary_on_stderr(bundled_model):
    result = invoke(
        "generate",
        "-m",
        MODEL,
        "--engine",
        "torch",
        "-p",
        EDIT_PROMPT,
        "-n",
        "12",
        "--prompt-lookup",
        "--prompt-lookup-policy",
        "gated",
        "--no-warm-up",
    )
    assert result.exit_code == 0, result.stderr
    out_lines = result.stdout.rstrip("\n").splitlines()
    assert re.fullmatch(
        r"\[Generated 12 tokens in \d+\.\d{3} s = \d+\.\d{2} tok/s\]", out_lines[-4]
    )
    assert re.fullmatch(r"\[Prompt\] \d+ tokens in \d+\.\d{3} s = \d+\.\d{2} tok/s", out_lines[-3])
    assert re.fullmatch(r"\[Generation\] 11 tokens in \d+\.\d{3} s = \d+\.\d{2} tok/s "
                        r"\(after the first token\)", out_lines[-2])
    assert re.fullmatch(r"\[Peak memory\] \d+\.\d{3} GB \(process peak RSS\)", out_lines[-1])
    assert "[Prompt lookup]" not in result.stdout
    summary = [line for line in result.stderr.splitlines() if line.startswith("[Prompt lookup]")]
    assert len(summary) == 1 and SUMMARY_RE.match(summary[0])
    assert "[Warm-up]" not in result.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_stdin_system_prompt_and_the_streamed_reply_equal_the_json_reply(bundled_model):
    args = ["generate", "-m", MODEL, "--engine", "torch", "--device", "cpu", "-n", "10",
            "--prompt-lookup", "--system-prompt", "You repeat code exactly."]
    streamed = CliRunner().invoke(app, [*args, "-p", "-"], input=EDIT_PROMPT)
    assert streamed.exit_code == 0, streamed.stderr
    whole = CliRunner().invoke(app, [*args, "--prompt-file", "-", "--json"], input=EDIT_PROMPT)
    reply = json.loads(whole.stdout)
    assert streamed.stdout.startswith(reply["text"] + "\n[Generated 10 tokens in ")
    assert reply["decode_tok_per_s"] == pytest.approx(9 / reply["timings"]["decode_s"])
    assert reply["prompt_tok_per_s"] == pytest.approx(
        reply["prompt_tokens"] / reply["timings"]["prefill_s"])
    assert reply["peak_memory_gb"] > 0.1 and reply["memory_kind"] == "process peak RSS"
    default_system = generate_json("-p", EDIT_PROMPT, "-n", "1", "--no-warm-up")
    assert default_system["prompt_tokens"] != reply["prompt_tokens"]  # the system turn is in
    refused = invoke("generate", "-m", MODEL, "--engine", "torch", "-p", "hi", "--no-chat",
                     "--system-prompt", "x")
    assert refused.exit_code == 2 and "--system-prompt needs the chat template" in refused.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_loop_guard_stops_plain_and_lookup_at_the_same_token(bundled_model):
    prompt = looping_prompt()
    guard = ("-p", prompt, "-n", "80", "--loop-guard", "1,16,4", "--no-warm-up")
    plain = generate_json(*guard)
    lookup = generate_json(*guard, "--prompt-lookup")
    assert plain["stop_reason"] == lookup["stop_reason"] == "loop_guard"
    assert lookup["token_ids"] == plain["token_ids"]
    assert plain["generated_tokens"] < 80
    # Lookup copied the loop before the guard fired: the stop can land mid-block.
    assert lookup["counters"]["accepted"] > 0


@pytest.mark.slow
@pytest.mark.torch
def test_calibrate_json_names_its_host_so_replay_checks_that_hosts_runs(
    bundled_model, tmp_path, monkeypatch
):
    # Without `host` a saved `calibrate --json` never filled replay's measured column.
    from specfleet.report.predictions import load_cost_file

    monkeypatch.setenv("SPECFLEET_HOST", "vm-1")
    result = invoke(
        "calibrate", "-m", MODEL, "--engine", "torch", "--device", "cpu", "--max-width", "2",
        "--prompt-len", "8", "--rounds", "1", "--steps", "2", "--reps", "1", "--no-warm-up",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    (tmp_path / "t.json").write_text(result.stdout)
    table = load_cost_file(tmp_path / "t.json")
    assert (table.host, table.engine, table.device, table.model) == (
        "vm-1", "torch", "cpu", MODEL)
    assert table.measured_where(("vm-1", "torch", "cpu", MODEL, "p"))


@pytest.mark.slow
@pytest.mark.torch
def test_calibrate_stores_a_table_that_the_calibrated_policy_then_uses(
    bundled_model, tmp_path, monkeypatch
):
    db = str(tmp_path / "cal.db")
    # generate reads the table from its --db, not from the default store (empty here).
    monkeypatch.setenv("SPECFLEET_DB", str(tmp_path / "default.db"))
    result = invoke(
        "calibrate", "-m", MODEL, "--engine", "torch", "--device", "cpu", "--max-width", "3",
        "--prompt-len", "16", "--rounds", "2", "--steps", "4", "--reps", "1", "--no-warm-up",
        "--store", "--db", db,
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"pipelined step: \d+\.\d{3} ms", lines[2])
    rows = [line.split() for line in lines[4:] if line[:1] == " " or line[:1].isdigit()]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert lines[-1].startswith("ratio: median over the 2 rounds; min, max:")  # not an interval
    # sync ms, ratio, lowest and highest round: lowest <= ratio <= highest.
    assert all(float(r[1]) > 0 and float(r[3]) <= float(r[2]) <= float(r[4]) for r in rows)
    assert "calibrate: round 2/" in result.stderr and "stored in" in result.stderr
    reply = invoke("generate", "-m", MODEL, "--engine", "torch", "-p", EDIT_PROMPT, "-n", "12",
                   "--prompt-lookup", "--prompt-lookup-policy", "calibrated", "--json",
                   "--no-warm-up", "--db", db)
    assert reply.exit_code == 0, reply.stderr
    # n is 2, or 4 when noise made the table non-monotone and it was re-measured.
    n = re.search(r" n=(\d+) ", lines[1]).group(1)
    assert "[Calibrated] width-cost table of" in reply.stderr and f"(n={n}," in reply.stderr
    out = json.loads(reply.stdout)
    assert out["prompt_lookup"]["policy"] == "calibrated"
    assert out["prompt_lookup"]["max_draft"] == 32 and len(out["prompt_lookup"]["costs"]) == 3


@pytest.mark.slow
@pytest.mark.torch
def test_a_model_whose_cache_cannot_be_rolled_back_is_one_clean_refusal(bundled_model, tmp_path):
    """A Bamba model: transformers computes its verify block differently from its steps, so
    prompt lookup could never equal plain decoding: refused in one line (plain decoding of it
    works). A Mamba model, whose recorded block equals its steps (transformers 5.25+), runs."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from specfleet.engine.runners.torch_rollback import recurrent_rollback_here

    tiny = {"vocab_size": 49152, "hidden_size": 16, "num_hidden_layers": 2}
    configs = {
        "bamba": AutoConfig.for_model(
            "bamba", **tiny, intermediate_size=32, attn_layer_indices=[1],
            num_attention_heads=2, num_key_value_heads=1, mamba_n_heads=2, mamba_d_head=16,
            mamba_d_state=4, mamba_n_groups=1, mamba_chunk_size=8, mamba_expand=2),
        "mamba": AutoConfig.for_model("mamba", **tiny, state_size=4),
    }
    replies = {}
    for name, config in configs.items():
        folder = tmp_path / f"tiny-{name}"
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        AutoTokenizer.from_pretrained(bundled_model).save_pretrained(folder)
        for lookup in ("lookup", "plain"):
            flags = ["--prompt-lookup"] if lookup == "lookup" else []
            replies[name, lookup] = invoke(
                "generate", "-m", str(folder), "--engine", "torch", "--device", "cpu",
                "-p", "hello hello hello", "-n", "6", *flags, "--json")
    refused = replies["bamba", "lookup"]
    assert refused.exit_code == 2, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: ") and "bamba: its recurrent layers" in line, line
    assert line.endswith("plain decoding works"), line
    assert "Traceback" not in refused.output
    assert replies["bamba", "plain"].exit_code == 0, replies["bamba", "plain"].output
    recorded = recurrent_rollback_here() == "record"  # else Mamba is refused as Bamba is
    assert replies["mamba", "lookup"].exit_code == (0 if recorded else 2)
    if recorded:
        by_lookup, plain = (json.loads(replies["mamba", way].stdout) for way in ("lookup", "plain"))
        assert by_lookup["token_ids"] == plain["token_ids"] and plain["generated_tokens"] == 6
        assert by_lookup["prompt_lookup"], by_lookup


@pytest.mark.torch
def test_plain_says_its_warm_up_is_the_first_forwards(bundled_model):
    # Plain decoding verifies nothing, yet its warm-up line read "verify widths 2..8".
    plain = invoke("generate", "-m", MODEL, "--engine", "torch", "-p", "hi", "-n", "2")
    assert plain.exit_code == 0, plain.stderr
    assert re.search(r"^\[Warm-up\] first forwards \(widths 2\.\.8\) in \d+\.\d{3} s ",
                     plain.stderr, re.M), plain.stderr


@pytest.mark.torch
def test_the_warm_up_stays_inside_a_short_context_of_learned_positions(bundled_model, tmp_path):
    # Verify width 65 of --prompt-lookup-max-draft 64 ran past GPT-2's 48 positions in the
    # warm-up: an IndexError traceback, though the prompt and reply fitted.
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.for_model("gpt2", vocab_size=49152, n_positions=48, n_embd=16,
                                  n_layer=1, n_head=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(bundled_model).save_pretrained(tmp_path)
    result = invoke("generate", "-m", str(tmp_path), "--engine", "torch", "-p", "hi", "-n", "4",
                    "--prompt-lookup", "--prompt-lookup-max-draft", "64")
    assert result.exit_code == 0, result.output
    assert "[Prompt lookup] rounds=" in result.stderr, result.stderr
    assert "[Warm-up] verify widths 2..23 in " in result.stderr  # the widths it ran, not 2..65
