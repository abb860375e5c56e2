"""Matrix specs: valid forms load, every mistake is one line naming file, field, expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfleet.configs import matrix_path, models_file, packaged_names, prompt_path, prompts_dir
from specfleet.engine.config import LookupOptions
from specfleet.errors import UserError
from specfleet.jobs.run import Target
from specfleet.jobs.spec import MatrixSpec, TargetSelector, matrix_json_schema
from specfleet.jobs.spec_files import load_matrix_spec, load_parity_spec

PACKAGED = models_file().parent
PROMPTS = ("edit_fn", "edit_json", "summary", "write", "story")

GOOD = """\
name: t
models: [m1]
prompts: [edit_fn, story]
arms: [plain, graded, gated]
"""


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A configs/ tree: prompts/<five>.txt and an empty matrices/ folder."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "matrices").mkdir()
    for name in PROMPTS:
        (tmp_path / "prompts" / f"{name}.txt").write_text(f"Prompt {name}.\n")
    return tmp_path


def write(configs: Path, text: str, name: str = "bad.yaml") -> Path:
    path = configs / "matrices" / name
    path.write_text(text)
    return path


def test_good_file_loads_with_shorthands_and_defaults(configs: Path) -> None:
    spec = load_matrix_spec(write(configs, GOOD))
    assert spec.arm_names() == ["plain", "graded", "gated"]
    assert [p.name for p in spec.prompts] == ["edit_fn", "story"]
    assert (spec.repeats, spec.temperature, spec.chat, spec.loop_guard) == (5, 0.0, True, None)
    assert Path(spec.prompt_dir) == (configs / "prompts").resolve()


def test_a_relative_model_folder_is_read_from_the_files_folder(configs: Path, monkeypatch,
                                                               tmp_path: Path) -> None:
    # A worker runs in another folder: `./smol` must name the folder beside the matrix file.
    monkeypatch.chdir(tmp_path)
    text = GOOD.replace("models: [m1]", "models: [./smol, ../up, m1, hf:org/name]") + \
        "prompt_suffix: {./smol: ' /no_think'}\n"
    spec = load_matrix_spec(write(configs, text))
    beside = (configs / "matrices").resolve()
    assert spec.models == [str(beside / "smol"), str(configs.resolve() / "up"), "m1",
                           "hf:org/name"]
    assert spec.prompt_suffix == {str(beside / "smol"): " /no_think"}


def test_long_forms_options_and_loop_guard_string(configs: Path) -> None:
    text = GOOD.replace("arms: [plain, graded, gated]", (
        "arms: [plain, {arm: gated, max_draft: 4, ngram_min: 1}, fixed]\n"
        "loop_guard: '1, 16, 5'\nmax_tokens: {default: 100, mlx: 40}\n"
        "targets: {engines: [torch, mlx], kinds: [linux-cpu]}\n"))
    spec = load_matrix_spec(write(configs, text))
    gated, fixed = spec.arms[1], spec.arms[2]
    assert gated.lookup_options() == LookupOptions(ngram_min=1, ngram_max=3, max_draft=4,
                                                   adaptive=True)
    assert fixed.lookup_options().adaptive is False
    assert (spec.loop_guard.min_period, spec.loop_guard.max_period,
            spec.loop_guard.repeats) == (1, 16, 5)
    assert spec.max_tokens_for(spec.prompts[0], "mlx") == 40
    assert spec.max_tokens_for(spec.prompts[0], "torch") == 100
    assert spec.targets.matches(Target(host="a", engine="mlx", device="cpu"), "linux-cpu")
    assert not spec.targets.matches(Target(host="a", engine="mlx", device="cpu"), "mac-mlx")


def test_inline_prompt_and_prompt_dir_field(configs: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "hello.md").write_text("Hi there.")
    text = ("name: t\nmodels: [m]\nprompt_dir: ../elsewhere\n"
            "prompts: [hello, {name: inline, text: 'Say hi.'}]\narms: [plain]\n")
    spec = load_matrix_spec(write(configs, text))
    assert Path(spec.prompt_dir) == other.resolve()


def test_speedups_false_allows_no_plain(configs: Path) -> None:
    text = GOOD.replace("[plain, graded, gated]", "[graded]") + "speedups: false\n"
    assert load_matrix_spec(write(configs, text)).arm_names() == ["graded"]


# (yaml text, substrings the one-line message must contain). Each names the field.
BAD: list[tuple[str, list[str]]] = [
    ("name: [t\n", ["line 2, column 1: YAML syntax error"]),
    (GOOD + "arms: [plain]\n", ["line 5, column 1: YAML syntax error: duplicate key 'arms'"]),
    ("", ["the file is empty"]),
    ("- a\n- b\n", ["expected a mapping of fields at the top level"]),
    (GOOD + "repeat: 3\n", ["repeat: unknown field", "did you mean 'repeats'"]),
    (GOOD + "repeats: '3'\n", ["repeats: expected an integer, got '3'"]),
    (GOOD + "repeats: 0\n", ["repeats: must be at least 1, got 0"]),
    (GOOD + "seed: 1.5\n", ["seed: expected an integer, got 1.5"]),
    (GOOD + "temperature: -0.5\n", ["temperature: must be at least 0.0"]),
    (GOOD + "chat: maybe\n", ["chat: expected true or false, got 'maybe'"]),
    (GOOD + "require_quiet: 1\n", ["require_quiet: expected true or false, got 1"]),
    (GOOD.replace("gated]", "{arm: gated, max_draft: 65}]"),
     ["arms[2].max_draft: max-draft (65) must be at most 64"]),
    (GOOD.replace("gated]", "{arm: gated, max_draft: 0}]"),
     ["arms[2].max_draft: max-draft must be at least 1"]),
    (GOOD.replace("graded,", "{arm: graded, ngram_min: 0},"),
     ["arms[1].ngram_min: ngram-min must be at least 1"]),
    (GOOD.replace("graded,", "{arm: graded, ngram_max: 17},"),
     ["arms[1].ngram_max: ngram-max (17) must be at most 16"]),
    (GOOD.replace("graded,", "{arm: graded, ngram_min: 4},"),
     ["arms[1].ngram_min: ngram-max (3) must be >= ngram-min (4)"]),
    (GOOD.replace("graded,", "{arm: graded, ngram_min: 3, ngram_max: 2},"),
     ["arms[1].ngram_max: ngram-max (2) must be >= ngram-min (3)"]),
    (GOOD.replace("graded,", "{arm: graded, max_draft: many},"),
     ["arms[1].max_draft: expected an integer, got 'many'"]),
    (GOOD.replace("graded,", "greedy,"), ["arms[1].arm: expected one of", "got 'greedy'"]),
    (GOOD.replace("graded,", "{arm: graded, draft: 3},"),
     ["arms[1].draft: unknown field", "max_draft"]),
    (GOOD.replace("graded,", "[graded],"),
     ["arms[1]: expected an arm name or a mapping with arm: NAME and its options, got a list"]),
    (GOOD.replace("gated]", "graded]"), ["arms[2]: duplicate arm 'graded'"]),
    (GOOD.replace("[plain, graded, gated]", "[graded, gated]"),
     ["arms: add the plain arm", "speedups: false"]),
    (GOOD.replace("[plain,", "[{arm: plain, max_draft: 3},"),
     ["arms[0].max_draft: the plain arm takes no prompt-lookup options"]),
    (GOOD.replace("arms: [plain, graded, gated]", "arms: []"), ["arms: must not be empty"]),
    (GOOD.replace("[edit_fn, story]", "[edit_fn, nosuch]"),
     ["prompts[1]: no prompt file 'nosuch.txt'", "available: edit_fn, edit_json"]),
    (GOOD.replace("[edit_fn, story]", "[story, story]"),
     ["prompts[1].name: duplicate prompt 'story'"]),
    (GOOD.replace("[edit_fn, story]", "[{name: x, text: '  '}]"),
     ["prompts[0].text: must not be empty"]),
    (GOOD.replace("[edit_fn, story]", "['../etc/passwd']"),
     ["prompts[0].name: use letters, digits"]),
    (GOOD.replace("[edit_fn, story]", "[{name: story, max_tokens: {gpu: 3}}]"),
     ["prompts[0].max_tokens.gpu: unknown field", "default, mlx, torch, toy"]),
    (GOOD.replace("models: [m1]\n", ""), ["models: required field is missing"]),
    (GOOD.replace("[m1]", "[]"), ["models: must not be empty"]),
    (GOOD.replace("[m1]", "[m1, m1]"), ["models[1]: duplicate model 'm1'"]),
    (GOOD.replace("name: t", "name: my demo"), ["name: use letters, digits"]),
    (GOOD + "max_tokens: 0\n", ["max_tokens: must be between 1 and 131072, got 0"]),
    (GOOD + "max_tokens: {mlx: 40}\n", ["max_tokens: give 'default'"]),
    (GOOD + "max_tokens: {mlx: 40}\ntargets: {engines: [mlx, torch]}\n",
     ["max_tokens: give 'default' or 'torch'"]),
    (GOOD + "loop_guard: '1,2'\n", ["loop_guard: expected 'min_period,max_period,repeats'"]),
    (GOOD + "loop_guard: {min_period: 5, max_period: 3}\n",
     ["loop_guard.max_period: must be >= min_period (5), got 3"]),
    (GOOD + "loop_guard: {min_period: 1, max_period: 3, repeats: 1}\n",
     ["loop_guard.repeats: must be at least 2"]),
    (GOOD + "targets: {engines: [cuda]}\n", ["targets.engines[0]: expected one of", "'cuda'"]),
    (GOOD + "targets: {engine: [mlx]}\n", ["targets.engine: unknown field",
                                           "did you mean 'engines'"]),
    (GOOD + "prompt_suffix: {m2: ' /no_think'}\n", ["prompt_suffix.m2: not one of models (m1)"]),
]


@pytest.mark.parametrize(("text", "expected"), BAD, ids=[f"bad{i:02d}" for i in range(len(BAD))])
def test_each_mistake_is_one_line_naming_file_and_field(
    configs: Path, text: str, expected: list[str]
) -> None:
    path = write(configs, text)
    with pytest.raises(UserError) as info:
        load_matrix_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message, message


def test_missing_file_and_directory(configs: Path) -> None:
    with pytest.raises(UserError, match=r"nope\.yaml: no such file$"):
        load_matrix_spec(configs / "matrices" / "nope.yaml")
    with pytest.raises(UserError, match="is a directory"):
        load_matrix_spec(configs / "matrices")


def test_missing_prompt_directory_is_named(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD + "prompt_dir: nowhere\n")
    with pytest.raises(UserError, match=r"m\.yaml: prompts\[0\]: .* does not exist"):
        load_matrix_spec(path)


def test_a_file_without_prompts_beside_it_reads_the_packaged_prompts(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(GOOD)
    assert Path(load_matrix_spec(path).prompt_dir) == prompts_dir()


def test_a_bare_name_is_the_packaged_matrix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing named demo here
    spec = load_matrix_spec("demo")
    assert spec.name == "demo" and Path(spec.prompt_dir) == prompts_dir()
    assert matrix_path("full") == PACKAGED / "matrices" / "full.yaml"
    with pytest.raises(UserError, match=r"^nosuch: no such file, nor a packaged matrix "
                                        r"\(packaged: demo, full, governor\)$"):
        load_matrix_spec("nosuch")
    (tmp_path / "demo").write_text(GOOD)  # a file in the working folder wins over the package
    assert load_matrix_spec("demo").name == "t"


def test_a_bare_prompt_name_is_the_packaged_prompt(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert prompt_path("story") == prompts_dir() / "story.txt"
    assert prompt_path("story.txt") == Path("story.txt")  # a path stays a path
    assert set(PROMPTS) <= set(packaged_names(prompts_dir()))


def test_a_few_problems_are_all_named_in_the_one_line(configs: Path) -> None:
    path = write(configs, GOOD + "repeats: x\nseed: y\n")
    with pytest.raises(UserError) as info:
        load_matrix_spec(path)
    assert str(info.value) == (f"{path}: repeats: expected an integer, got 'x'; also seed: "
                               "expected an integer, got 'y'")


def test_past_three_problems_the_line_counts_the_rest_and_says_where_to_see_them(
        configs: Path) -> None:
    path = write(configs, GOOD.replace("[m1]", "[m1, m1]")
                 + "repeats: x\nseed: y\nchat: maybe\nspeedups: 2\n")
    with pytest.raises(UserError) as info:
        load_matrix_spec(path)
    assert str(info.value) == (
        f"{path}: models[1]: duplicate model 'm1' (list each once); also repeats: expected an "
        "integer, got 'x'; also seed: expected an integer, got 'y' (+2 more; `specfleet "
        f"matrix validate {path}` lists every one)")


def test_parity_spec_forces_greedy_single_repeat(configs: Path) -> None:
    path = write(configs, GOOD + "temperature: 0.7\nseed: 5\n")
    spec = load_parity_spec(path)
    assert (spec.repeats, spec.temperature, spec.seed) == (1, 0.0, None)
    assert spec.overridden == ["repeats 5 -> 1", "temperature 0.7 -> 0", "seed 5 -> none"]
    assert isinstance(spec, MatrixSpec) and spec.label == str(path)  # messages name the file


def test_parity_spec_needs_plain_even_without_speedups(configs: Path) -> None:
    text = GOOD.replace("[plain, graded, gated]", "[graded]") + "speedups: false\n"
    with pytest.raises(UserError, match="parity compares every arm with plain"):
        load_parity_spec(write(configs, text))


def test_parity_spec_of_plain_alone_is_refused_before_it_runs(configs: Path) -> None:
    # It ran every plain run, then failed the check: "planned no arm besides plain".
    text = GOOD.replace("[plain, graded, gated]", "[plain]")
    with pytest.raises(UserError, match=r"arms: plain alone: .*; expected an arm besides plain"):
        load_parity_spec(write(configs, text))


def test_schema_lists_the_fields_and_refuses_others() -> None:
    schema = matrix_json_schema()
    assert {"name", "models", "prompts", "arms", "loop_guard", "targets"} <= set(
        schema["properties"])
    assert schema["additionalProperties"] is False


def _shipped_prompt_dir(tmp_path: Path) -> Path:
    """The repo's prompts once all five exist; until then a fixture with the same names."""
    real = PACKAGED / "prompts"
    if all((real / f"{name}.txt").is_file() for name in PROMPTS):
        return real
    for name in PROMPTS:
        (tmp_path / f"{name}.txt").write_text(f"Prompt {name}.")
    return tmp_path


@pytest.mark.parametrize("name", ["full", "governor"])
def test_shipped_matrices_validate(name: str, tmp_path: Path) -> None:
    path = PACKAGED / "matrices" / f"{name}.yaml"
    spec = load_matrix_spec(path, _shipped_prompt_dir(tmp_path))
    assert [p.name for p in spec.prompts] == list(PROMPTS)
    assert spec.arm_names() == ["plain", "graded", "gated"]
    assert spec.repeats == 3 and spec.temperature == 0.0


def test_governor_matches_the_reference_limits(tmp_path: Path) -> None:
    spec = load_matrix_spec(PACKAGED / "matrices/governor.yaml", _shipped_prompt_dir(tmp_path))
    limits = {p.name: spec.max_tokens_for(p, "mlx") for p in spec.prompts}
    assert limits == {"edit_fn": 400, "edit_json": 400, "summary": 400, "write": 400,
                      "story": 800}
    assert len(spec.models) == 4


def test_peer_arms_load_with_transformers_lookup_defaults(configs: Path) -> None:
    text = GOOD.replace("[plain, graded, gated]",
                        "[plain, graded, hf, {arm: hf-lookup, max_draft: 5}, mlx-lm]")
    arms = {a.arm: a for a in load_matrix_spec(write(configs, text)).arms}
    assert arms["hf-lookup"].lookup_options() == LookupOptions(
        ngram_min=1, ngram_max=2, max_draft=5, adaptive=False)
    assert arms["hf"].lookup_options() == arms["mlx-lm"].lookup_options() == LookupOptions()


PEERS = GOOD.replace("[plain, graded, gated]", "[plain, graded, hf-lookup]")
PEER_BAD: list[tuple[str, str]] = [
    (GOOD.replace("gated]", "{arm: hf, max_draft: 3}]"),
     "arms[2].max_draft: the hf arm takes no options"),
    (PEERS.replace("hf-lookup]", "{arm: hf-lookup, ngram_min: 2}]"),
     "arms[2].ngram_min: hf-lookup looks up n-grams of ngram_max down to 1, as its library "
     "does; set ngram_max and max_draft only"),
    (PEERS.replace("hf-lookup]", "{arm: hf-lookup, max_draft: 65}]"),
     "arms[2].max_draft: max-draft (65) must be at most 64"),
    (PEERS + "temperature: 0.7\n",
     "arms[2]: hf-lookup decodes greedily (a peer is compared with plain greedy decoding); "
     "set temperature: 0, got 0.7"),
    (PEERS + "targets: {engines: [mlx]}\n",
     "arms[2]: hf-lookup runs on torch targets only, and targets.engines is [mlx]; add torch "
     "or drop the arm"),
]




def test_a_folder_beside_the_matrix_named_like_a_packaged_prompt_is_refused(tmp_path) -> None:
    path = tmp_path / "m" / "x.yaml"  # no ../prompts: named prompts are the packaged ones
    path.parent.mkdir()
    path.write_text("name: t\nmodels: [m1]\nprompts: [story]\narms: [plain]\n")
    assert load_matrix_spec(path).prompt_dir == str(prompts_dir())
    (path.parent / "story.txt").write_text("a text file here is not read: the packaged is\n")
    assert load_matrix_spec(path).prompt_dir == str(prompts_dir())
    (path.parent / "story.txt").unlink()
    (path.parent / "story").mkdir()
    with pytest.raises(UserError) as err:
        load_matrix_spec(path)
    assert str(err.value) == (f"{path}: prompts[0]: {path.parent}/story: is a directory; "
                              "expected a prompt text file")


# A key YAML reads as no text, a number out of range or a name too long: each line says what
# was written and what is expected (pydantic said "[1]: Keys should be strings").
SAID = [
    (GOOD + "yes: 1\n", "key true (unquoted yes, on or true): expected a field name (text)"),
    (GOOD + "5: x\n", "key 5: expected a field name (text)"),
    (GOOD + "prompt_suffix: {5: x}\n", "prompt_suffix: key 5: expected a name (text)"),
    (GOOD + "temperature: .inf\n",
     "temperature: expected a finite number, at least 0.0 and at most 10.0, got inf"),
    (GOOD + "temperature: .nan\n",
     "temperature: expected a finite number, at least 0.0 and at most 10.0, got nan"),
    (GOOD.replace("name: t", "name: " + "n" * 300),
     "name: must be at most 128 characters, got 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... "
     "(300 characters)"),
]


@pytest.mark.parametrize(("text", "expected"), PEER_BAD + SAID,
                         ids=[f"peer{i}" for i in range(len(PEER_BAD))]
                         + [f"said{i}" for i in range(len(SAID))])
def test_a_mistake_names_what_was_written_and_what_is_expected(
    configs: Path, text: str, expected: str
) -> None:
    """A misplaced or misconfigured peer arm, a key or value: one line, the file first."""
    path = write(configs, text)
    with pytest.raises(UserError) as info:
        load_matrix_spec(path)
    assert str(info.value) == f"{path}: {expected}"


def test_yaml_merge_keys_are_read_and_a_key_twice_is_still_refused(configs: Path) -> None:
    # `<<: *base` is YAML 1.1 users write; it was "could not determine a constructor".
    text = ("name: t\nmodels: [m1]\narms: [plain]\ntargets: &t {engines: [mlx, torch]}\n"
            "prompts:\n  - name: story\n    targets:\n      <<: *t\n      engines: [torch]\n")
    spec = load_matrix_spec(write(configs, text))
    assert spec.prompts[0].targets == TargetSelector(engines=["torch"])  # beside it overrides
    twice = text + "      engines: [mlx]\n"
    with pytest.raises(UserError, match=r"line 10, column 7: YAML syntax error: duplicate "
                                        r"key 'engines'"):
        load_matrix_spec(write(configs, twice))
    inside = text.replace("<<: *t", "<<: [*t, {hosts: [a], hosts: [b]}]")
    with pytest.raises(UserError, match=r"duplicate key 'hosts'"):
        load_matrix_spec(write(configs, inside))
