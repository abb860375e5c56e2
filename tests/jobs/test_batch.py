"""Generation batches: JSONL prompts, target references, one-line mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.jobs.batch import load_generate_job, parse_target_ref, select_target
from specfleet.jobs.run import Target

TARGETS = [Target(host="a", engine="torch", device="cpu"),
           Target(host="a", engine="mlx", device="cpu"),
           Target(host="a", engine="mlx", device="cuda")]


def test_parse_and_select_target() -> None:
    assert select_target(parse_target_ref("a/torch"), TARGETS) == TARGETS[0]
    assert select_target(parse_target_ref("a/mlx/cuda"), TARGETS) == TARGETS[2]


@pytest.mark.parametrize(("text", "message"), [
    ("a", "--target: expected HOST/ENGINE or HOST/ENGINE/DEVICE, got 'a'"),
    ("a//cpu", "--target: expected HOST/ENGINE or HOST/ENGINE/DEVICE, got 'a//cpu'"),
    ("a/jax", "--target: engine: expected one of 'mlx', 'torch' or 'toy', got 'jax'"),
    ("a/mlx/tpu", "--target: device: expected one of"),
])
def test_bad_target_refs(text: str, message: str) -> None:
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(")):
        parse_target_ref(text)


def test_unknown_or_ambiguous_target() -> None:
    with pytest.raises(UserError, match=r"^--target: no target b/mlx in the fleet \(targets: "):
        select_target(parse_target_ref("b/mlx"), TARGETS)
    with pytest.raises(UserError, match=r"a/mlx names 2 targets; add the device"):
        select_target(parse_target_ref("a/mlx"), TARGETS)


def test_a_host_not_in_the_fleet_is_said_with_the_hosts_there() -> None:
    # Only the named host's targets are asked for: it read "(targets: none)".
    with pytest.raises(UserError, match=r"^--target: no host b in the fleet \(hosts: a, c\); "
                                        r"`specfleet fleet status` lists their targets$"):
        select_target(parse_target_ref("b/mlx"), [], fleet_hosts=["c", "a"])
    with pytest.raises(UserError, match=r"^--target: no target a/torch/cuda in the fleet "
                                        r"\(targets: a/mlx/cpu, a/mlx/cuda, a/torch/cpu\)$"):
        select_target(parse_target_ref("a/torch/cuda"), TARGETS, fleet_hosts=["a"])


@pytest.mark.parametrize(("text", "message"), [
    ("", "b.jsonl: no prompts"),
    ('{"prompt": "x"}\nnot json\n', "b.jsonl: line 2: not JSON"),
    ('["x"]\n', 'b.jsonl: line 1: expected a JSON object like {"prompt": "..."}'),
    ('{"text": "x"}\n', "b.jsonl: line 1: prompt: required field is missing; also text: unknown field"),
    ('{"prompt": ""}\n', "b.jsonl: line 1: prompt: must not be empty"),
    ('{"prompt": "x", "max_tokens": 0}\n', "b.jsonl: line 1: max_tokens: must be at least 1"),
    ('{"prompt": "x", "name": "a"}\n{"prompt": "y", "name": "a"}\n',
     "b.jsonl: duplicate prompt name 'a'"),
    ('{"prompt": "a\\u0000b"}\n', "b.jsonl: line 1: prompt: contains a NUL character"),
    ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n",  # json's recursion, not a trace
     'b.jsonl: line 1: nested too deeply; expected a flat JSON object like {"prompt": "..."}'),
    ('{"prompt": "a' + "\x01" + '"}\n',
     "b.jsonl: line 1: not JSON (Invalid control character at column 14)"),
])
def test_bad_prompt_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_generate_job(path, model="m", target="a/torch")
    assert str(info.value).startswith(f"{tmp_path}/{message}"), str(info.value)


def test_bad_flags_name_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text('{"prompt": "x"}\n')
    with pytest.raises(UserError, match=r"^--max-tokens: must be at least 1, got 0$"):
        load_generate_job(path, model="m", target="a/torch", max_tokens=0)
    with pytest.raises(UserError, match=r"^--policy: expected one of"):
        load_generate_job(path, model="m", target="a/torch", policy="fast")
    with pytest.raises(UserError, match=r"^--prompt-lookup-max-draft: max-draft \(65\) must be "
                       r"at most 64$"):
        load_generate_job(path, model="m", target="a/torch", lookup={"max_draft": 65})
    with pytest.raises(UserError, match=r"^--prompt-lookup-ngram-max: ngram-max \(1\) must be"):
        load_generate_job(path, model="m", target="a/torch", lookup={"ngram_max": 1})
    with pytest.raises(UserError, match=r"no such file; expected a JSONL file"):
        load_generate_job(tmp_path / "none.jsonl", model="m", target="a/torch")


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_line_separator_inside_a_prompt_is_text(tmp_path: Path, separator: str) -> None:
    """Valid JSON holds these raw in a string; a line ends only at a newline (splitlines()
    cut the prompt there: 'not JSON (Unterminated string ...)')."""
    path = tmp_path / "b.jsonl"
    path.write_text(f'{{"prompt": "one{separator}two"}}\n{{"prompt": "three"}}\n',
                    encoding="utf-8")
    job = load_generate_job(path, model="m", target="a/torch")
    assert [p.prompt for p in job.prompts] == [f"one{separator}two", "three"]


def test_a_lone_surrogate_escaped_in_a_prompt_is_named(tmp_path) -> None:
    # pydantic said "unable to parse raw data as a unicode string", and for a key no field.
    from specfleet.jobs.batch import read_prompt_lines

    for line, said in [('{"prompt": "a\\ud800b"}', "line 1: prompt: contains '\\ud800'"),
                       ('{"\\udc00": 1, "prompt": "a"}', "line 1: document: a key contains")]:
        path = tmp_path / "b.jsonl"
        path.write_text(line + "\n")
        with pytest.raises(UserError, match="half of a UTF-16 surrogate pair") as err:
            read_prompt_lines(path)
        assert said in str(err.value), str(err.value)


def test_a_null_name_is_no_name(tmp_path: Path) -> None:
    # `"name": null` passed as None: the reply was stored as "" and two such lines shared
    # one run key, so one overwrote the other.
    from specfleet.jobs.plan import plan_generate_runs

    path = tmp_path / "b.jsonl"
    path.write_text('{"prompt": "x", "name": null}\n{"prompt": "y", "name": null}\n')
    job = load_generate_job(path, model="m", target="a/torch")
    assert [p.name for p in job.prompts] == ["line-1", "line-2"]
    runs = plan_generate_runs(job, TARGETS[0], "gen-b-000001")
    assert len({r.run_key for r in runs}) == 2 and [r.prompt_name for r in runs] == [
        "line-1", "line-2"]


def test_prompts_dash_reads_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import types

    piped = types.SimpleNamespace(buffer=io.BytesIO(b'{"prompt": "x"}\n{"name": "b", "prompt": "y"}\n'))
    monkeypatch.setattr("sys.stdin", piped)
    job = load_generate_job("-", model="m", target="a/torch")
    assert [(p.name, p.prompt) for p in job.prompts] == [("line-1", "x"), ("b", "y")]
    monkeypatch.setattr("sys.stdin", types.SimpleNamespace(buffer=io.BytesIO(b"{not json\n")))
    with pytest.raises(UserError, match=r"^--prompts -: line 1: "):
        load_generate_job("-", model="m", target="a/torch")
    monkeypatch.setattr("sys.stdin", None)  # started with `<&-`
    with pytest.raises(UserError, match=r"^--prompts -: standard input is closed; expected a JSONL"):
        load_generate_job("-", model="m", target="a/torch")
