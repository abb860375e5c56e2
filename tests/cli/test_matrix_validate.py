"""`specfleet matrix validate` on real files: every independent mistake at once, one line
each; `matrix run` refusing the same file in one line; the summary of a good file saying what
each target gets. No fleet: toy models, or models resolved on this machine."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import describe_value
from specfleet.jobs.plan import plan_runs
from specfleet.jobs.run import Target
from specfleet.jobs.spec_files import load_matrix_spec

GOOD = """\
name: v
models: ["script:1ms"]
prompts: [{name: p, text: "hello hello"}]
arms: [plain, graded]
targets: {engines: [toy]}
"""


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def error_lines(result) -> list[str]:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    return result.stderr.splitlines()


def test_validate_names_every_independent_mistake_in_one_run(tmp_path: Path) -> None:
    # Wrong types (an unknown key, repeats out of range, an unknown policy) and mistakes
    # across fields (a model twice, a prompt file missing, a suffix for no model): the user
    # fixed one, reran, and only then met the next.
    path = write(tmp_path, """\
name: v
models: ["script:1ms", "script:1ms"]
prompts: [{name: p, text: "hello hello"}, nosuch]
arms: [plain, turbo]
repeats: 0
colour: blue
prompt_suffix: {other: " x"}
targets: {engines: [toy]}
prompt_dir: here
""")
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "q.txt").write_text("a prompt\n")
    lines = error_lines(invoke("matrix", "validate", path))
    assert lines == [
        f"error: {path}: models[1]: duplicate model 'script:1ms' (list each once)",
        f"error: {path}: prompts[1]: no prompt file 'nosuch.txt' in {tmp_path}/here "
        "(available: q)",
        f"error: {path}: arms[1].arm: expected one of 'plain', 'auto', 'graded', 'gated', "
        "'calibrated', 'fixed', 'hf', 'hf-lookup', 'mlx-lm', 'llama.cpp' or "
        "'llama.cpp-lookup', got 'turbo'",
        f"error: {path}: repeats: must be at least 1, got 0",
        f"error: {path}: colour: unknown field (expected one of: name, models, prompts, arms, "
        "repeats, max_tokens, temperature, seed, chat, loop_guard, require_quiet, speedups, "
        "targets, prompt_suffix, prompt_dir)",
        f"error: {path}: prompt_suffix.other: not one of models (script:1ms, script:1ms)",
    ]


def test_validate_names_every_mistake_across_fields(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('["script:1ms"]', '["script:1ms", "script:1ms"]')
                 .replace("[plain, graded]", "[plain, {arm: graded, max_draft: 999}, plain]")
                 + "loop_guard: {min_period: 5, max_period: 3}\n")
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: models[1]: duplicate model 'script:1ms' (list each once)",
        f"error: {path}: arms[1].max_draft: max-draft (999) must be at most 64",
        f"error: {path}: arms[2]: duplicate arm 'plain' (each arm once)",
        f"error: {path}: loop_guard.max_period: must be >= min_period (5), got 3",
    ]


def test_a_check_that_reads_a_mistyped_field_is_left_out(tmp_path: Path) -> None:
    # A peer arm is checked against the temperature: with the temperature itself wrong, that
    # would only repeat its mistake; the model named twice is another one.
    text = (GOOD.replace('["script:1ms"]', "[m1, m1]").replace("[plain, graded]", "[plain, hf]")
            .replace("[toy]", "[torch]") + "temperature: hot\n")
    path = write(tmp_path, text)
    unknown, *rest = error_lines(invoke("matrix", "validate", path))
    assert unknown.startswith(f"error: {path}: models[0]: torch: model 'm1' is neither an alias")
    assert rest == [
        f"error: {path}: models[1]: duplicate model 'm1' (list each once)",
        f"error: {path}: temperature: expected a number, got 'hot'",
    ]


def test_matrix_run_refuses_the_same_file_in_one_line(tmp_path: Path) -> None:
    few = write(tmp_path, GOOD.replace('["script:1ms"]', "[m1, m1]") + "repeats: 0\n", "few.yaml")
    (line,) = error_lines(invoke("matrix", "run", few, "--db", f"sqlite:///{tmp_path}/s.db"))
    assert line == (f"error: {few}: models[1]: duplicate model 'm1' (list each once); also "
                    "repeats: must be at least 1, got 0")
    many = write(tmp_path, GOOD.replace('["script:1ms"]', "[m1, m1]")
                 + "repeats: 0\nseed: x\nchat: 3\ncolour: blue\n", "many.yaml")
    (line,) = error_lines(invoke("matrix", "run", many, "--db", f"sqlite:///{tmp_path}/s.db"))
    assert line == (f"error: {many}: models[1]: duplicate model 'm1' (list each once); also "
                    "repeats: must be at least 1, got 0; also seed: expected an integer, got "
                    f"'x' (+2 more; `specfleet matrix validate {many}` lists every one)")
    assert not (tmp_path / "s.db").exists()
    # validate also names the model no engine knows (m1 is no toy model), once
    assert len(error_lines(invoke("matrix", "validate", many))) == 6


def test_an_unknown_model_is_named_beside_the_files_other_mistakes(tmp_path: Path) -> None:
    # The misspelt alias was named only once the arm and the repeats were fixed.
    path = write(tmp_path, "name: v\nmodels: [smolm2-135m, 4, ./nofolder]\nprompts: [story]\n"
                 "arms: [plain, grded]\nrepeats: three\n")
    lines = error_lines(invoke("matrix", "validate", path))
    assert [line.split(": ")[2] for line in lines] == [
        "models[0]", "models[1]", "models[2]", "arms[1].arm", "repeats"]
    assert lines[0].startswith(f"error: {path}: models[0]: model 'smolm2-135m' is neither an "
                               "alias in ")  # once, not per engine
    assert lines[2].startswith(f"error: {path}: models[2]: model '{tmp_path}/nofolder' is "
                               "neither an alias")


def test_a_model_folder_too_long_once_read_from_the_files_folder(tmp_path: Path) -> None:
    # `./` + 250 characters is 256 as written, longer than the store's column once read from
    # the file's folder: it passed, and hid every other model's mistake from validate.
    far = "./" + "m" * 250
    path = write(tmp_path, f"name: v\nmodels: ['{far}', nosuch]\nprompts: [story]\n"
                 "arms: [plain]\nrepeats: 0\ntargets: {engines: [torch]}\n")
    lines = error_lines(invoke("matrix", "validate", path))
    assert [line.split(": ")[2] for line in lines] == ["models[0]", "models[1]", "repeats"]
    anchored = tmp_path / far[2:]
    assert lines[0] == (f"error: {path}: models[0]: must be at most 256 characters as an "
                        f"absolute path, got {describe_value(str(anchored))} "
                        f"({len(str(anchored))} characters)")
    assert lines[1].startswith(f"error: {path}: models[1]: torch: model 'nosuch' is neither")


def test_a_prompt_entry_with_two_problems_names_both(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('[{name: p, text: "hello hello"}]',
                                        "[{name: my prompt, txt: hi}]"))
    (line,) = error_lines(invoke("matrix", "run", path))
    assert line == (f"error: {path}: prompts[0].name: use letters, digits, '_', '-' and '.' "
                    "only, starting with a letter or digit, got 'my prompt'; also "
                    "prompts[0].txt: unknown field (did you mean 'text'? expected one of: "
                    "name, text, max_tokens, targets)")


ARMS_NAMED = ("expected one of 'plain', 'auto', 'graded', 'gated', 'calibrated', 'fixed', "
              "'hf', 'hf-lookup', 'mlx-lm', 'llama.cpp' or 'llama.cpp-lookup'")


def test_every_bad_prompt_is_named_not_only_the_first(tmp_path: Path) -> None:
    # One prompt of the wrong type hid the others' mistakes until the user fixed it.
    path = write(tmp_path, GOOD.replace('[{name: p, text: "hello hello"}]', """
  - {name: p, text: "hello hello"}
  - 42
  - {name: q, text: "   "}
  - nosuch
  - {name: p, text: again}""") + "prompt_dir: here\n")
    (tmp_path / "here").mkdir()
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: prompts[1]: expected a prompt name or a mapping with name and text, "
        "got 42",
        f"error: {path}: prompts[2].text: must not be empty",
        f"error: {path}: prompts[3]: no prompt file 'nosuch.txt' in {tmp_path}/here "
        "(available: none)",
        f"error: {path}: prompts[4].name: duplicate prompt 'p'",
    ]
    (line,) = error_lines(invoke("matrix", "run", path))
    assert line.endswith("; also prompts[3]: no prompt file 'nosuch.txt' in "
                         f"{tmp_path}/here (available: none) (+1 more; `specfleet matrix "
                         f"validate {path}` lists every one)")


def test_every_bad_arm_is_named_in_the_files_order(tmp_path: Path) -> None:
    # Type mistakes and option checks interleave by position; with an arm left out (it may
    # be a misspelt plain) "add the plain arm" is not said.
    path = write(tmp_path, GOOD.replace(
        "[plain, graded]",
        "[plian, {arm: graded, max_draft: 999}, {arm: gated, colour: red}, graded]"))
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: arms[0].arm: {ARMS_NAMED}, got 'plian'",
        f"error: {path}: arms[1].max_draft: max-draft (999) must be at most 64",
        f"error: {path}: arms[2].colour: unknown field (expected one of: arm, ngram_min, "
        "ngram_max, max_draft)",
        f"error: {path}: arms[3]: duplicate arm 'graded' (each arm once)",
    ]


def test_every_bad_model_is_named(tmp_path: Path) -> None:
    # The suffix may be for the model of the wrong type: not called "not one of models".
    path = write(tmp_path, GOOD.replace('["script:1ms"]', '["script:1ms", 3, "script:1ms", "  "]')
                 + "prompt_suffix: {other: ' x'}\n")
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: models[1]: expected a string, got 3",
        f"error: {path}: models[2]: duplicate model 'script:1ms' (list each once)",
        f"error: {path}: models[3]: must not be blank",
    ]


def test_every_bad_target_is_named_in_the_matrixs_and_a_prompts_selector(
        tmp_path: Path) -> None:
    # The only engine is of the wrong type: a limit for "every engine" is not asked for.
    path = write(tmp_path, GOOD.replace(
        '{name: p, text: "hello hello"}',
        '{name: p, text: "hello hello", targets: {devices: [cpu, gpu9, cpu]}}').replace(
        "targets: {engines: [toy]}",
        "max_tokens: {mlx: 5}\ntargets: {hosts: [a, 'bad host', a, 7], engines: [nope]}"))
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: prompts[0].targets.devices[1]: expected one of 'metal', 'cuda', "
        "'mps' or 'cpu', got 'gpu9'",
        f"error: {path}: prompts[0].targets.devices[2]: duplicate device 'cpu' (list each once)",
        f"error: {path}: targets.hosts[1]: expected a host name of letters, digits, '_', '.' "
        "or '-', starting and ending with a letter or digit (at most 63), got 'bad host'",
        f"error: {path}: targets.hosts[2]: duplicate host 'a' (list each once)",
        f"error: {path}: targets.hosts[3]: expected a string, got 7",
        f"error: {path}: targets.engines[0]: expected one of 'mlx', 'torch' or 'toy', "
        "got 'nope'",
    ]


def test_a_mistyped_field_leaves_out_only_the_checks_that_read_it(tmp_path: Path) -> None:
    # The temperature is read by the peer arm's check alone: the other arm's options and a
    # prompt file are still checked, as with a target selector of the wrong type.
    path = write(tmp_path, GOOD.replace('[{name: p, text: "hello hello"}]', "[nosuch]")
                 .replace("[plain, graded]", "[plain, {arm: graded, max_draft: 999}, hf]")
                 .replace("targets: {engines: [toy]}", "temperature: hot\ntargets: 5")
                 + "prompt_dir: here\n")
    (tmp_path / "here").mkdir()
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: prompts[0]: no prompt file 'nosuch.txt' in {tmp_path}/here "
        "(available: none)",
        f"error: {path}: arms[1].max_draft: max-draft (999) must be at most 64",
        f"error: {path}: temperature: expected a number, got 'hot'",
        f"error: {path}: targets: expected a mapping, got 5",
    ]


# Prompts of their own engines and a peer arm of one engine: torch and mlx targets get
# different runs (validate said "18 runs per target" of every one).
BY_ENGINE = """\
name: v
models: [smollm2-135m]
prompts:
  - {name: edit, text: "def f(): pass", targets: {engines: [torch]}}
  - {name: story, text: "Once upon a time"}
arms: [plain, graded, hf-lookup]
repeats: 3
max_tokens: 8
targets: {engines: [torch, mlx]}
"""


def _summary(tmp_path: Path, text: str) -> str:
    result = invoke("matrix", "validate", write(tmp_path, text))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout.split(": ok: ")[1].split(" (")[0]


def test_the_summary_says_what_each_engines_targets_get(tmp_path: Path) -> None:
    assert _summary(tmp_path, BY_ENGINE) == ("1 model x 2 prompts x 3 arms x 3 repeats: "
                                             "18 runs per torch target, 6 per mlx target")
    spec = load_matrix_spec(tmp_path / "m.yaml")
    targets = [Target(host=host, engine=engine, device="cpu")
               for host in ("a", "b") for engine in ("torch", "mlx")]
    planned = Counter(run.target.engine for run in plan_runs(spec, targets, "id"))
    assert planned == {"torch": 2 * 18, "mlx": 2 * 6}  # what the line says, per target


def test_the_summary_leaves_out_a_model_without_a_source_for_an_engine(tmp_path: Path) -> None:
    # smollm2-135m-q4 is MLX only: validate said "2 runs per target", and the run then
    # skipped it on torch, planning 1 there.
    text = BY_ENGINE.replace("[smollm2-135m]", "[smollm2-135m, smollm2-135m-q4]").replace(
        "targets: {engines: [torch, mlx]}\n", "")
    assert _summary(tmp_path, text) == ("2 models x 2 prompts x 3 arms x 3 repeats: "
                                        "12 runs per mlx target, 18 per torch target")


def test_the_summary_of_a_uniform_matrix_is_one_count(tmp_path: Path) -> None:
    assert _summary(tmp_path, GOOD) == ("1 model x 1 prompt x 2 arms x 5 repeats = 10 runs per "
                                        "target")
    hosts = GOOD.replace('text: "hello hello"}',
                         'text: "hello hello", targets: {hosts: [a]}}, {name: q, text: hi}')
    assert _summary(tmp_path, hosts) == ("1 model x 2 prompts x 2 arms x 5 repeats = up to 20 "
                                         "runs per target")


def test_a_scalar_yaml_cannot_read_as_its_type_is_one_line(tmp_path: Path) -> None:
    # PyYAML raised KeyError/ValueError on each (a traceback); `0x_` read as 4300 digits.
    for field, said in [
        ("chat: !!bool maybe", "line 6, column 7: YAML syntax error: 'maybe' is no valid "
         "boolean; expected true or false, or quotes around it for text"),
        ("loop_guard: 2024-13-01", "'2024-13-01' is no valid date"),
        ("temperature: !!float abc", "'abc' is no valid number"),
        ("seed: 0x_", "'0x_' is no valid integer"),
        ("speedups: !!map x", "expected a mapping node, but found scalar"),
    ]:
        (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, GOOD + field)))
        assert said in line, line


def test_numbers_yaml_11_and_a_reader_disagree_on_are_refused(tmp_path: Path) -> None:
    # YAML 1.1 read `1:10` as 70 (base 60) and `017` as 15 (octal): silently another number.
    for field, said in [
        ("seed: 1:10", "line 6, column 7: YAML syntax error: '1:10' reads as a base-60 number "
         "in YAML 1.1; expected a plain number, or quotes around it for text"),
        ("temperature: 0:30.5", "'0:30.5' reads as a base-60 number"),
        ("seed: 017", "'017' reads as an octal number in YAML 1.1; expected a number without "
         "a leading zero, or quotes around it for text"),
        ("seed: -0_17", "'-0_17' reads as the number -15 in YAML 1.1"),
        # And `1_0` as 10, `0b11` as 3: YAML 1.2 and a reader see text (a typo, often).
        ("repeats: 1_0", "line 6, column 10: YAML syntax error: '1_0' reads as the number 10 in "
         "YAML 1.1; expected a plain number (no '_', no 0b), or quotes around it for text"),
        ("repeats: 0b11", "'0b11' reads as the number 3 in YAML 1.1"),
        ("temperature: 0_0.5", "'0_0.5' reads as the number 0.5 in YAML 1.1"),
    ]:
        (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, GOOD + field)))
        assert said in line, line


def test_a_control_character_is_one_line_naming_where(tmp_path: Path) -> None:
    # PyYAML's own text spanned two lines and named `<unicode string>` and a byte offset.
    for text, said in [
        (GOOD.replace("name: ", "name: t\x01", 1), "line 1, column 8: character U+0001 (a "
         "control character) is not allowed in YAML; expected printable text"),
        (GOOD + "seed: 1\x1b\n", "line 6, column 8: character U+001B"),
    ]:
        (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, text)))
        assert said in line, line


def test_a_loop_guard_is_read_as_strictly_as_every_field(tmp_path: Path) -> None:
    # The mapping took '1', 32.0 and true for counts; a count past the bound was said as
    # "got 100001", whatever was written.
    for field, said in [
        ("loop_guard: {min_period: '1'}", "loop_guard.min_period: expected an integer, got '1'"),
        ("loop_guard: {max_period: 32.0}", "loop_guard.max_period: expected an integer, got "
         "32.0"),
        ("loop_guard: {repeats: true}", "loop_guard.repeats: expected an integer, got true"),
        ("loop_guard: '1,1000000,4'", "loop_guard: max_period must be at most 100000, got "
         "1000000"),
    ]:
        (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, GOOD + field)))
        assert line.endswith(said), line


def test_yaml_12_exponents_read_as_numbers(tmp_path: Path) -> None:
    # YAML 1.1 read `1e3` as text ("expected an integer, got '1e3'"); a zero stays a zero.
    spec = load_matrix_spec(write(tmp_path, GOOD + "temperature: 5e-1\nseed: 00\n"))
    assert (spec.temperature, spec.seed) == (0.5, 0)
    (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, GOOD + "seed: 1e3")))
    assert "seed: expected an integer, got 1000.0" in line, line


def test_a_lone_surrogate_is_named_with_its_field(tmp_path: Path) -> None:
    # It passed validate and `matrix run` failed hashing the prompt, with a traceback.
    text = GOOD.replace('"hello hello"', '"hello \\ud83d"')
    (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, text)))
    assert line.endswith("prompts[0].text: contains '\\ud83d', half of a UTF-16 surrogate "
                         "pair; expected plain text (a character escape like \\U0001F600)")


def test_a_model_folder_under_the_home_of_no_user_is_named(tmp_path: Path) -> None:
    # Anchoring `~USER/m` to the file's folder raised RuntimeError: a traceback.
    text = GOOD.replace('"script:1ms"', '"~specfleet-no-such-user/m"').replace("toy", "torch")
    (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, text)))
    assert "models[0]: torch: model '~specfleet-no-such-user/m': no home folder" in line


def test_a_prompt_dir_too_long_to_look_up_does_not_exist(tmp_path: Path) -> None:
    # is_dir() raised ENAMETOOLONG: a traceback.
    text = GOOD.replace('{name: p, text: "hello hello"}', "p") + f"prompt_dir: {'d' * 5000}\n"
    (line,) = error_lines(invoke("matrix", "validate", write(tmp_path, text)))
    assert "prompts[0]: no prompt 'p': prompt directory" in line and "does not exist" in line


def test_a_link_named_like_a_packaged_matrix_is_the_users(tmp_path: Path, monkeypatch) -> None:
    # A link named `demo` that leads nowhere (or to itself): the packaged demo was read instead.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").symlink_to(tmp_path / "gone.yaml")
    assert error_lines(invoke("matrix", "validate", "demo")) == [
        "error: demo: is a dangling link; expected a regular file"]
    (tmp_path / "full").symlink_to("full")
    assert error_lines(invoke("matrix", "validate", "full")) == [
        "error: full: cannot read (Too many levels of symbolic links)"]


def test_a_missing_prompt_lists_only_names_a_prompt_could_take_and_not_all_of_them(
        tmp_path: Path) -> None:
    # prompt_dir: /etc listed ".pwd, adduser, ..." (stems of .pwd.lock and adduser.conf,
    # which no prompt name reads) and every one of its files in one line.
    here = tmp_path / "here"
    here.mkdir()
    for name in ("a.txt", "b.md", "c.conf", ".hidden.lock", "plain"):
        (here / name).write_text("a prompt\n")
    (here / "sub.txt").mkdir()
    (tmp_path / "many").mkdir()
    for i in range(25):
        (tmp_path / "many" / f"p{i:02d}.txt").write_text("a prompt\n")
    text = GOOD.replace('[{name: p, text: "hello hello"}]', "[nosuch]")
    few = error_lines(invoke("matrix", "validate", write(tmp_path, text + "prompt_dir: here\n")))
    assert few[0].endswith("(available: a, b, c.conf, plain)"), few
    many = error_lines(invoke("matrix", "validate", write(tmp_path, text + "prompt_dir: many\n")))
    assert many[0].endswith(", p19, ... (5 more))"), many
    assert "p20" not in many[0]


def test_an_unquoted_date_is_named_as_a_date_with_the_fix(tmp_path: Path) -> None:
    # It said "got datetime.date(2024, 1, 1)": Python's repr of what YAML read.
    path = write(tmp_path, "name: 2024-01-01\n" + GOOD.split("\n", 1)[1])
    assert error_lines(invoke("matrix", "validate", path)) == [
        f"error: {path}: name: expected a string, got a date (2024-01-01; quote it for text)"]
