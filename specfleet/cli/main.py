"""The `specfleet` command: one Typer sub-app per noun, joined here."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import MutableMapping
from typing import Annotated, NoReturn

import typer
from typer import _click  # typer 0.29 vendors click: parsing raises its own UsageError
from typer.core import TyperGroup

from specfleet.engine.config import ConfigError
from specfleet.errors import INTERRUPTED_EXIT, UserError, describe_value, is_utf8, one_line


def _usage_error(err: _click.exceptions.UsageError, where: str) -> NoReturn:
    """Say a usage mistake in one line (`where` names the command when `err` carries no
    context) and exit 2; a bare `specfleet` or group still shows its help."""
    if type(err).__name__ == "NoArgsIsHelpError":
        raise err
    if err.ctx is not None:
        where = err.ctx.command_path
    # typer's Literal check prefixes pydantic's "Value error, "; the rest says it all.
    message = _as_expected(" ".join(err.format_message().split()).replace("Value error, ", ""))
    if isinstance(err, _click.exceptions.MissingParameter):
        message = _missing_text(err) or message
    elif not re.search(r"\bexpected\b", message) and (more := _expected_instead(err, message,
                                                                                 where)):
        message = message.rstrip(".") + more
    given = _rejected_input(err)
    if (too_long := _too_many_digits(err, given)) is not None:
        message, given = message.replace(_INT_TOO_LONG, too_long), None
    if given is not None and repr(given) not in message:  # a Literal's check names it
        message += f"; got {describe_value(given)}"
    typer.echo(f"error: {one_line(f'{where}: {message}')}", err=True)
    raise typer.Exit(2) from None


_BOUNDS = {"greater than or equal to": ">=", "less than or equal to": "<=",
           "greater than": ">", "less than": "<"}
_INPUT_SHOULD_BE = re.compile(r"Input should be (?:(" + "|".join(_BOUNDS) + r") )?")


def _as_expected(message: str) -> str:
    """pydantic's range and type checks in the words every other refusal uses: "Input should
    be greater than or equal to 1" -> "expected a number >= 1"."""
    return _INPUT_SHOULD_BE.sub(
        lambda m: f"expected a number {_BOUNDS[m[1]]} " if m[1] else "expected ", message)


# pydantic's words for an integer of more digits than int() reads (4300 by default).
_INT_TOO_LONG = "Unable to parse input string as an integer, exceeded maximum size"


def _too_many_digits(err: _click.exceptions.UsageError, given: object) -> str | None:
    """`-n 999...9` (5000 digits) in the words of the option's bound, `a number of 5000
    digits; expected a number <= 131072`, where pydantic said only "exceeded maximum size";
    None for any other mistake."""
    if not isinstance(given, str) or _INT_TOO_LONG not in err.format_message():
        return None
    below = given.strip().startswith("-")
    bound = getattr(getattr(err, "param", None), "min" if below else "max", None)
    expected = (f"a number {'>=' if below else '<='} {bound}" if bound is not None else
                f"a whole number of at most {sys.get_int_max_str_digits()} digits")
    return f"a number of {len(given.strip().lstrip('+-'))} digits; expected {expected}"


def _missing_text(err: _click.exceptions.MissingParameter) -> str | None:
    """A missing argument or option named as the usage line names it, with its help and the
    command's usage: click says only "Missing argument 'b'"."""
    param, ctx = err.param, err.ctx
    if param is None or ctx is None:
        return None
    what = (getattr(param, "help", None) or "").rstrip(".")
    if param.param_type_name == "argument":
        name = param.metavar or (param.name or "").upper()
        usage = " ".join([ctx.command_path, *ctx.command.collect_usage_pieces(ctx)])
        return f"missing argument {name}" + (f" ({what})" if what else "") + f"; expected {usage}"
    flag = max(getattr(param, "opts", None) or [f"--{param.name}"], key=len)
    return f"missing option {flag}" + (f" ({what})" if what else "") + f"; expected {flag} VALUE"


def _expected_instead(err: _click.exceptions.UsageError, message: str, where: str) -> str:
    """What click's own usage messages leave out: what is expected instead, where the
    message names no suggestion of its own ("Did you mean", "Possible options")."""
    help_page = f"`{where} -h`"
    if isinstance(err, _click.exceptions.NoSuchOption):
        return "" if err.possibilities else f"; expected an option that {help_page} lists"
    if isinstance(err, _click.exceptions.BadOptionUsage) and "requires an argument" in message:
        return f"; expected a value after {err.option_name} ({help_page} says which)"
    if isinstance(err, _click.exceptions.BadOptionUsage) and "does not take a value" in message:
        return f"; expected {err.option_name} alone (a switch)"
    if message.startswith("Got unexpected extra argument"):
        return f"; expected the arguments that {help_page} shows, no more"
    if message.startswith("No such command") and "Did you mean" not in message:
        return f"; expected a command that {help_page} lists"
    return ""


def _rejected_input(err: _click.exceptions.UsageError) -> object | None:
    """The value typer's pydantic check refused (`--limit x`), which its message leaves out;
    None where the mistake is not one refused value."""
    from pydantic import ValidationError

    if not isinstance(err.__cause__, ValidationError):
        return None
    found = err.__cause__.errors()
    return found[0].get("input") if len(found) == 1 else None


class OneLineErrorsGroup(TyperGroup):
    """Turns user mistakes raised anywhere below (our own errors and usage mistakes such as
    a missing argument or an unknown option, the root's own options included) into ONE
    stderr line and exit status 2 (an error's own `exit_code` where it says another).
    As the root, it builds a command from its module (`COMMANDS`) when it is first asked
    for; reading `commands` whole builds them all."""

    @property
    def commands(self) -> MutableMapping[str, _click.Command]:
        for name in COMMANDS:
            self._command_built(name)
        return self._built

    @commands.setter
    def commands(self, value) -> None:
        self._built: MutableMapping[str, _click.Command] = dict(value)

    def get_command(self, ctx, cmd_name: str) -> _click.Command | None:
        return self._command_built(cmd_name)

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def _command_built(self, name: str) -> _click.Command | None:
        if name not in self._built and name in COMMANDS:
            self._built.update(_module_commands(COMMANDS[name]))
        return self._built.get(name)

    def invoke(self, ctx):
        words = [*ctx._protected_args, *ctx.args]  # the group's invoke consumes them
        try:
            self._refuse_repeated_options(ctx, words)
            return super().invoke(ctx)
        except (UserError, ConfigError) as err:
            for line in getattr(err, "lines", None) or [str(err)]:  # several: `matrix validate`
                typer.echo(f"error: {one_line(line)}", err=True)
            raise typer.Exit(getattr(err, "exit_code", 2)) from None
        except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (see `entry.main`)
            typer.echo(f"interrupted: {err}" if str(err) else "interrupted", err=True)
            raise typer.Exit(INTERRUPTED_EXIT) from None
        except _click.exceptions.UsageError as err:
            _usage_error(err, self._command_named(ctx, words))

    def make_context(self, info_name, args, parent=None, **extra):
        """The root's own options are parsed here, before `invoke` (`specfleet --bogus`);
        every argument must be UTF-8 text."""
        try:
            bad = next((arg for arg in args if not is_utf8(arg)), None)
            if bad is not None:
                raise _click.exceptions.UsageError(
                    f"argument {bad!r} is not UTF-8 text; expected UTF-8")
            return super().make_context(info_name, args, parent=parent, **extra)
        except _click.exceptions.UsageError as err:
            _usage_error(err, info_name or "specfleet")

    def _command_named(self, ctx, words: list[str]) -> str:
        """`specfleet matrix list`: the deepest command `words` name. click's parser raises
        an option's missing or unwanted value ('--limit' requires an argument) without the
        context of the command it was parsing."""
        return " ".join(self._deepest_command(ctx, words)[0])

    def _deepest_command(self, ctx, words: list[str]
                         ) -> tuple[list[str], _click.Command, list[str]]:
        """The command path `words` name, that command, and the words left for it."""
        path = [ctx.command_path]
        command: _click.Command = self  # then each subcommand, group or not
        for word in words:
            sub = command.get_command(ctx, word) if isinstance(command, TyperGroup) else None
            if sub is None:
                break
            path.append(word)
            command = sub
        return path, command, words[len(path) - 1:]

    def _refuse_repeated_options(self, ctx, words: list[str]) -> None:
        """An option that takes one value, given twice (`--db a.db ... --db b.db`, `--chat
        --no-chat`): click let the last win without a word, as a YAML key given twice did."""
        path, command, rest = self._deepest_command(ctx, words)
        if isinstance(command, TyperGroup):
            return
        probe = command.context_class(command, info_name=path[-1], parent=ctx)
        try:  # a parse without conversion or callbacks: only which option took each word
            _, _, order = command.make_parser(probe).parse_args(args=list(rest))
        except _click.exceptions.UsageError:
            return  # the real parse says what is wrong
        once = [p for p in order if p.param_type_name == "option" and not p.multiple
                and not getattr(p, "count", False) and not p.is_eager]
        twice = next((p for p in once if once.count(p) > 1), None)
        if twice is not None:
            flag = "/".join([max(twice.opts, key=len), *twice.secondary_opts])
            times = once.count(twice)
            raise _click.exceptions.UsageError(
                f"{flag} given {'twice' if times == 2 else f'{times} times'} (the last would "
                "win without a word); expected it once")


app = typer.Typer(
    name="specfleet",
    cls=OneLineErrorsGroup,
    help="Prompt-lookup speculative decoding across a fleet, with every measurement kept.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Subcommands inherit the context settings: `-h` works on every command.
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version_text() -> str:
    """`specfleet X.Y.Z`, plus the git commit when running from a checkout."""
    import specfleet
    from specfleet.workers.hardware import git_commit

    commit = git_commit()
    return f"specfleet {specfleet.__version__}" + (f" (git {commit})" if commit else "")


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True,
        help="Print the version (and the git commit of a checkout) and exit.")] = False,
) -> None:
    """Prompt-lookup speculative decoding across a fleet, with every measurement kept."""

# Each command of the root -> the module under specfleet/cli/ that declares it: a module
# exposing `app` is the group of that name, one exposing `register(app)` adds top-level
# commands. A module is imported only when one of its commands runs (or the root's help
# lists them all), so a command starts in the time its own imports take, not every noun's
# (`specfleet fleet status` no longer loads SQLAlchemy, numpy and pydantic first).
COMMANDS: dict[str, str] = {
    "generate": "generate",
    "calibrate": "calibrate",
    "bench": "bench",
    "results": "results",
    "history": "results",
    "compare": "results",
    "parity": "parity",
    "report": "report",
    "serve": "serve",
    "replay": "replay",
    "selftest": "selftest",
    "models": "models",
    "db": "db",
    "matrix": "matrix",
    "job": "job",
    "fleet": "fleet",
}


def _module_commands(module_name: str) -> dict[str, _click.Command]:
    """The click commands one module under specfleet/cli/ declares, by name."""
    module = importlib.import_module(f"specfleet.cli.{module_name}")
    holder = typer.Typer(rich_markup_mode=None)  # click's help layout (`plain_help`)
    holder.callback()(lambda: None)  # a group, even around a module's single command
    if hasattr(module, "register"):
        module.register(holder)
    else:
        holder.add_typer(module.app, name=module_name.replace("_", "-"))
    built = typer.main.get_command(holder)
    assert isinstance(built, TyperGroup)
    for command in built.commands.values():
        _tidy_params(command)
    return dict(built.commands)


def _tidy_params(command: _click.Command) -> None:
    """On every option and argument of `command` and its subcommands: a number written with
    '_' (`--factor 1_1`) or a base prefix (0b, 0o, 0x) is refused, where Python's int() and
    pydantic read `1_1` as 11, a typo silently turned into a verdict's threshold; a list
    option shows `<engine,...>` in help (it takes comma-separated values), not typer's
    `<list[str]>`."""
    for param in command.params:
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if annotation in (int, float):
            param.process_value = _checking_digits(param.process_value)  # type: ignore[method-assign]
        elif annotation == list[str] and param.metavar is None:
            param.metavar = f"<{(param.name or 'value').replace('_', '-')},...>"
    for sub in getattr(command, "commands", {}).values():
        _tidy_params(sub)


_NOT_PLAIN = re.compile(r"\s*[-+]?0[bBoOxX]")  # a base prefix; '_' is found by `in`


def _checking_digits(process_value):
    def checked(ctx: _click.Context, value):
        for given in value if isinstance(value, list | tuple) else [value]:
            if isinstance(given, str) and ("_" in given or _NOT_PLAIN.match(given)):
                how = "digits grouped with '_'" if "_" in given else "a base prefix"
                raise _click.exceptions.BadParameter(
                    f"{given!r} is no plain number ({how}); expected digits only, such as 10 "
                    "or 1.5", ctx=ctx)
        return process_value(ctx, value)
    return checked


def plain_help(group: typer.Typer) -> None:
    """Click's help layout for `group`'s commands, not rich's boxes, which cut long option
    names to fit 80 columns (`--prompt-lookup…` for five of `generate`'s) and wrapped the
    text at its source lines."""
    group.rich_markup_mode = None


plain_help(app)

