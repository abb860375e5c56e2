"""The habits a user brings to any CLI: `-h` on every command, `--version`, completion."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import click
import pytest
import typer
from typer.testing import CliRunner

from specfleet.cli.main import app, version_text
from specfleet.errors import INTERRUPTED_EXIT
from specfleet.workers.hardware import git_commit


def _command_paths(group, prefix: list[str]) -> list[list[str]]:
    paths = [prefix]
    for name, command in getattr(group, "commands", {}).items():
        paths.extend(_command_paths(command, [*prefix, name]))
    return paths


def test_dash_h_works_on_every_command() -> None:
    root = typer.main.get_command(app)
    paths = _command_paths(root, [])
    assert ["matrix", "run"] in paths and ["generate"] in paths and len(paths) > 20
    for path in paths:
        result = CliRunner().invoke(app, [*path, "-h"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage: specfleet" in result.output and "--help" in result.output, path


def test_a_group_without_its_command_shows_its_commands() -> None:
    # `specfleet models` said only "error: specfleet models: Missing command.", naming none.
    root = typer.main.get_command(app)
    groups = [name for name, command in root.commands.items() if getattr(command, "commands", {})]
    assert "models" in groups and "fleet" in groups
    for name in groups:
        result = CliRunner().invoke(app, [name])
        assert result.exit_code == 2, (name, result.output)
        assert "Commands:" in result.output and "Missing command" not in result.output, name


def test_a_missing_argument_or_option_is_named_with_its_help_and_the_usage() -> None:
    # click said "Missing argument 'b'." (compare), naming neither what B is nor the usage.
    root = typer.main.get_command(app)
    checked = 0
    for path in _command_paths(root, []):
        command = root
        for name in path:
            command = command.commands[name]
        first = next((p for p in getattr(command, "params", []) if p.required), None)
        if first is None or getattr(command, "commands", {}):
            continue
        result = CliRunner().invoke(app, path)
        line = result.output.strip()
        assert result.exit_code == 2 and "\n" not in line, (path, result.output)
        help_text = first.help.rstrip(".")
        if first.param_type_name == "argument":
            usage = " ".join(["specfleet", *path, "[OPTIONS]"])
            assert line.startswith(f"error: specfleet {' '.join(path)}: missing argument "
                                   f"{first.metavar} ({help_text}); expected {usage}"), line
        else:
            flag = max(first.opts, key=len)
            assert line == (f"error: specfleet {' '.join(path)}: missing option {flag} "
                            f"({help_text}); expected {flag} VALUE"), line
        checked += 1
    assert checked >= 15


def test_every_option_name_is_whole_on_an_80_column_help_page(monkeypatch) -> None:
    # Rich's boxes cut five of generate's options to `--prompt-lookup…` at 80 columns.
    monkeypatch.setenv("COLUMNS", "80")
    root = typer.main.get_command(app)
    for path in _command_paths(root, []):
        command = root
        for name in path:
            command = command.commands[name]
        page = CliRunner().invoke(app, [*path, "-h"]).output
        assert "…" not in page and max(map(len, page.splitlines())) <= 80, path
        for option in getattr(command, "params", []):
            if not isinstance(option, click.Option):
                continue
            for name in option.opts + option.secondary_opts:
                assert name in page, (path, name)


@pytest.mark.parametrize(("args", "line"), [
    # click raises these without the command's context: the line named only `specfleet`.
    (["matrix", "list", "--limit"], "specfleet matrix list: Option '--limit' requires an "
     "argument; expected a value after --limit (`specfleet matrix list -h` says which)"),
    (["results", "--cells=yes"], "specfleet results: Option '--cells' does not take a value; "
     "expected --cells alone (a switch)"),
    (["job", "generate", "--prompts"], "specfleet job generate: Option '--prompts' requires "
     "an argument; expected a value after --prompts (`specfleet job generate -h` says which)"),
    # The root's own options: a usage line and a box of three more lines.
    (["--bogus", "matrix"], "specfleet: No such option: --bogus; expected an option that "
     "`specfleet -h` lists"),
    (["--version=3"], "specfleet: Option '--version' does not take a value; expected "
     "--version alone (a switch)"),
    # click names neither what is expected nor where to look.
    (["compare", "a", "b", "c"], "specfleet compare: Got unexpected extra argument(s) (c); "
     "expected the arguments that `specfleet compare -h` shows, no more"),
    (["matrix", "wibble"], "specfleet matrix: No such command 'wibble'; expected a command "
     "that `specfleet matrix -h` lists"),
    (["matrix", "shw"], "specfleet matrix: No such command 'shw'. Did you mean 'show'?"),
    # typer's own checks leave the refused value out; a Literal's names it once.
    (["matrix", "list", "--limit", "x"], "specfleet matrix list: Invalid value for '--limit': "
     "expected a valid integer, unable to parse string as an integer; got 'x'"),
    (["generate", "-m", "m", "--engine", "cobol"], "specfleet generate: Invalid value for "
     "'--engine': 'cobol' is not one of 'mlx', 'torch'."),
])
def test_an_option_mistake_is_one_line_naming_its_command(args, line) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {line}\n"


def test_version_names_the_checkout_commit() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    assert git_commit() == commit  # tests run from a checkout
    assert result.output == f"{version_text()}\n"
    assert re.fullmatch(rf"specfleet \d+\.\d+\.\d+\S* \(git {commit}\)\n", result.output)


def test_shell_completion_is_on(monkeypatch) -> None:
    # Name the shell instead of letting Typer detect the parent process (`sh` under make).
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = CliRunner().invoke(app, ["--show-completion", "bash"])
    assert result.exit_code == 0
    assert "_specfleet_completion" in result.output
    assert "--install-completion" in CliRunner().invoke(app, ["-h"]).output


def test_ctrl_c_while_the_commands_import_is_one_line(tmp_path) -> None:
    # The child's import of the command tree is held open (an import hook that waits), and
    # the SIGINT is sent once the child says it is inside it: no race with the box's load.
    _ctrl_c_once_it_says(_SLOW_IMPORT, "importing\n", "matrix", "list", "--db",
                         f"sqlite:///{tmp_path}/x.db")


def _ctrl_c_once_it_says(code: str, cue: str, *args: str, sig: int = signal.SIGINT,
                         hangup_ignored: bool = False) -> None:
    """Run `code` as the CLI with `args`, send `sig` once its stderr says `cue`: one line,
    exit 130. With `hangup_ignored` (as `nohup` starts it) a SIGHUP first changes nothing."""
    hangup = signal.SIG_IGN if hangup_ignored else signal.SIG_DFL  # whatever this test inherited
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup))
    assert child.stderr is not None
    assert child.stderr.readline() == cue
    if hangup_ignored:
        child.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert child.poll() is None  # it outlives its terminal, as `nohup` asked
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (130, "interrupted\n")


# The CLI held open in its import of the command tree (an import hook that waits), saying
# so on stderr. Under `make test` this child was seen to inherit SIGINT ignored (the command
# ran through); a command started from a shell has Python's own handler.
_SLOW_IMPORT = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    class Slow:
        def find_spec(self, name, path=None, target=None):
            if name == "specfleet.cli.main":
                sys.stderr.write("importing\\n"); sys.stderr.flush(); time.sleep(60)
            return None
    sys.meta_path.insert(0, Slow())
    from specfleet.cli.entry import main
    sys.argv[0] = "specfleet"
    main()
""")


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_a_closed_terminal_stops_a_command_as_ctrl_c_does(tmp_path) -> None:
    # SIGHUP killed the driver at once (exit 129): its runs stayed `running` for a lease.
    _ctrl_c_once_it_says(_SLOW_IMPORT, "importing\n", "matrix", "list", "--db",
                         f"sqlite:///{tmp_path}/x.db", sig=signal.SIGHUP)
    _ctrl_c_once_it_says(_SLOW_IMPORT, "importing\n", "matrix", "list", "--db",
                         f"sqlite:///{tmp_path}/x.db", hangup_ignored=True)


def test_signals_are_ignored_once_the_command_is_done() -> None:
    from specfleet.cli import entry

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    argv = sys.argv
    try:
        sys.argv = ["specfleet", "--version"]
        try:
            entry.main()
        except SystemExit as done:
            assert done.code in (0, None)
        # Only Ray's exit hook runs after this; a second Ctrl-C must not print its traceback.
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        sys.argv = argv
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _entry(*args: str) -> list[str]:
    return [sys.executable, "-c", "from specfleet.cli.entry import main; main()", *args]


def test_ctrl_c_while_the_command_tree_is_built_is_one_line(tmp_path) -> None:
    # Typer builds the click command after the import and before any command runs: a Ctrl-C
    # there escaped every handler as a traceback.
    code = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import typer.main
        def slow(app):
            sys.stderr.write("building\\n"); sys.stderr.flush(); time.sleep(60)
        typer.main.get_command = slow
        from specfleet.cli.entry import main
        main()
    """)
    _ctrl_c_once_it_says(code, "building\n", "matrix", "list")


def test_a_full_standard_output_is_one_line_and_a_failure(tmp_path) -> None:
    store = f"sqlite:///{tmp_path}/x.db"
    subprocess.run(_entry("db", "upgrade", "--db", store), check=True, capture_output=True)
    with open("/dev/full", "w") as full:
        done = subprocess.run(_entry("db", "current", "--db", store), stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        1, "error: cannot write to standard output: No space left on device\n")


def test_a_help_page_to_a_full_standard_output_is_one_line() -> None:
    # rich writes the help page: its OSError was a traceback.
    with open("/dev/full", "w") as full:
        done = subprocess.run(_entry("matrix", "run", "--help"), stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        1, "error: cannot write to standard output: No space left on device\n")


def test_a_switch_that_is_not_utf8_is_no_traceback_on_import() -> None:
    # specfleet's import reads SPECFLEET_OPENBLAS: its UserError escaped every handler.
    env = {**os.environ, "SPECFLEET_OPENBLAS": "\udcff"}
    done = subprocess.run(_entry("--version"), env=env, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_a_closed_standard_output_is_refused_not_silently_lost(tmp_path) -> None:
    # `specfleet results >&-`: every line vanished and the exit status was 0.
    done = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh",
                           *_entry("db", "current", "--db", f"sqlite:///{tmp_path}/x.db")],
                          stderr=subprocess.PIPE, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (
        1, "error: standard output is closed; expected it open (`> /dev/null` discards it)\n")


def test_a_stop_that_lands_in_a_finalizer_still_stops_the_command() -> None:
    # Python drops an exception raised in `__del__`: a SIGTERM landing there printed
    # "Exception ignored ... KeyboardInterrupt" and the command ran on to exit 0.
    code = textwrap.dedent("""
        import os, signal, sys, time
        import typer.main
        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.01)
        def build(app):
            Finalized()  # collected at once: the signal lands in its __del__
            sys.stderr.write("went on\\n"); sys.stderr.flush(); time.sleep(60)
        typer.main.get_command = build
        from specfleet.cli.entry import main
        sys.argv[0] = "specfleet"
        main()
    """)
    done = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                          text=True, timeout=30)
    assert (done.returncode, done.stderr) == (INTERRUPTED_EXIT, "went on\ninterrupted\n")


def test_a_stop_dropped_in_a_weakref_callback_still_stops_the_command() -> None:
    # Python drops an exception raised in a weakref callback too (importlib's module-lock
    # `cb` while the commands import, ~0.15 s in): "Exception ignored in: <function
    # _get_module_lock.<locals>.cb>" and a Ctrl-C'd command ran on to exit 0.
    code = textwrap.dedent("""
        import os, signal, sys, time, weakref
        import typer.main
        class Collected:
            pass
        def cb(ref):
            os.kill(os.getpid(), signal.SIGINT); time.sleep(0.01)
        def build(app):
            gone = Collected()
            keep = weakref.ref(gone, cb)
            del gone  # its callback runs at once: the signal lands there
            sys.stderr.write("went on\\n"); sys.stderr.flush(); time.sleep(60)
        typer.main.get_command = build
        from specfleet.cli.entry import main
        sys.argv[0] = "specfleet"
        main()
    """)
    done = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                          text=True, timeout=30)
    assert (done.returncode, done.stderr) == (INTERRUPTED_EXIT, "went on\ninterrupted\n")


def test_a_reply_a_stream_cannot_encode_is_escaped_not_a_traceback(tmp_path) -> None:
    # PYTHONIOENCODING=latin-1 and an emoji in a stored name: a UnicodeEncodeError traceback.
    from specfleet.store import open_store
    from tests.store.factory import grid

    url = f"sqlite:///{tmp_path / 's.db'}"
    with open_store(url) as store:
        store.create_matrix("smile", {}, [r.model_copy(update={"prompt_name": "p😀"})
                                          for r in grid(repeats=1)])
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    done = subprocess.run(_entry("results", "--db", url, "-o", "csv"), env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode(errors="replace")
    assert b"p\\U0001f600" in done.stdout
