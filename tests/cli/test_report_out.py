"""`specfleet report ID --out DIR`: where the record may go. A file of the user's that shares a
name with the record's, a `~` the shell left quoted and a folder above DIR that is missing are
each one `error:` line, exit 2, every file as it was; this matrix's own record is rewritten."""

from __future__ import annotations

import pwd
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from tests.serve.seed import BASE, NEXT, seed_store

RECORD = (f"{NEXT}.md", "runs.csv", "speedup-mac1-mlx-metal.png", "runs-mac1-mlx-metal.png")
NOT_OURS = (f"already there and not part of matrix {NEXT}'s record, which would replace it; "
            "expected an empty folder, a new one, or the folder of this matrix's own record")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'specfleet.db'}"
    seed_store(url)
    return url


@pytest.fixture()
def here(tmp_path, monkeypatch) -> Path:
    """The current folder, empty, with HOME the folder `home` beside it."""
    root = tmp_path.resolve()  # as the messages name it
    (root / "home").mkdir()
    (root / "work").mkdir()
    monkeypatch.chdir(root / "work")
    return root / "work"


def report(db: str, *args: str, matrix_id: str = NEXT):
    home = str(Path.cwd().parent / "home")
    return CliRunner().invoke(app, ["report", matrix_id, "--db", db, *args], env={"HOME": home})


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


def refused(result, said: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert result.stderr.splitlines() == [f"error: {said}"]
    assert result.stdout == ""


@pytest.mark.parametrize("mine", [
    ("runs.csv", "speedup-mac1-mlx-metal.png"),  # the tester's: both replaced, exit 0
    ("speedup-mac1-mlx-metal.png",),
    (f"{NEXT}.md",),  # the markdown's name, but not a record of this matrix
])
def test_a_users_file_of_a_records_name_is_refused(db, here, mine) -> None:
    folder = here / "d7"
    folder.mkdir()
    for name in mine:
        (folder / name).write_bytes(b"the user's own " + name.encode())
    (folder / "notes.txt").write_text("kept\n")
    before = snapshot(here.parent)
    refused(report(db, "--out", "d7"), f"d7/{mine[0]}: {NOT_OURS}")
    assert snapshot(here.parent) == before


def test_a_plot_the_earlier_record_does_not_show_is_refused(db, here) -> None:
    # This matrix's own record, but the runs plot is the user's: its markdown never showed it.
    assert report(db, "--out", "r").exit_code == 0
    markdown = here / "r" / f"{NEXT}.md"
    markdown.write_text(markdown.read_text().replace(
        "![runs-mac1-mlx-metal.png](runs-mac1-mlx-metal.png)\n", ""))
    (here / "r" / "runs-mac1-mlx-metal.png").write_bytes(b"the user's own")
    before = snapshot(here.parent)
    refused(report(db, "--out", "r"), f"r/runs-mac1-mlx-metal.png: {NOT_OURS}")
    assert snapshot(here.parent) == before


def test_a_new_folder_is_made_and_its_own_record_rewritten(db, here) -> None:
    first = report(db, "--out", "r")
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[0] == f"record: r/{NEXT}.md"
    assert sorted(p.name for p in (here / "r").iterdir()) == sorted(RECORD)
    (here / "r" / "README.md").write_text("what this record is\n")  # a user's note beside it
    csv = (here / "r" / "runs.csv").read_bytes()
    again = report(db, "--out", "r")
    assert again.exit_code == 0 and again.stderr == "", again.output
    assert sorted(p.name for p in (here / "r").iterdir()) == sorted((*RECORD, "README.md"))
    assert (here / "r" / "runs.csv").read_bytes() == csv
    assert (here / "r" / "README.md").read_text() == "what this record is\n"
    default = report(db, matrix_id=BASE)  # reports/ID: both made, as ever
    assert default.exit_code == 0 and (here / "reports" / BASE / f"{BASE}.md").is_file()


def test_out_expands_a_quoted_home(db, here) -> None:
    result = report(db, "--out", "~/rx")
    assert result.exit_code == 0, result.output
    home = here.parent / "home"
    assert result.stdout.splitlines()[0] == f"record: {home / 'rx' / f'{NEXT}.md'}"
    assert (home / "rx" / "runs.csv").is_file()
    assert list(here.iterdir()) == []  # no folder named `~`


def test_out_expands_a_users_home(db, here, monkeypatch) -> None:
    # A user whose home is a test folder: a real one's is no place to write.
    home = here.parent / "tester"
    home.mkdir()
    real = pwd.getpwnam
    monkeypatch.setattr(pwd, "getpwnam", lambda name: SimpleNamespace(pw_dir=str(home))
                        if name == "specfleet-tester" else real(name))
    result = report(db, "--out", "~specfleet-tester/rx")
    assert result.exit_code == 0, result.output
    assert (home / "rx" / f"{NEXT}.md").is_file() and list(here.iterdir()) == []


def test_out_of_an_unknown_users_home_is_refused(db, here) -> None:
    refused(report(db, "--out", "~specfleet-no-such-user/r"),
            "--out '~specfleet-no-such-user/r': no home folder for ~specfleet-no-such-user; "
            "expected ~ or ~USER of a known user, or a path without it")
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("out", ["{here}/missing/deep/dir", "~/missing/dir"])
def test_out_in_a_folder_that_does_not_exist_is_refused(db, here, out) -> None:
    # Only the last folder is made: a typo higher up made the whole tree from `/`.
    before = snapshot(here.parent)
    given = Path(out.replace("{here}", str(here)).replace("~", str(here.parent / "home")))
    refused(report(db, "--out", out.replace("{here}", str(here))),
            f"--out {given}: its folder {given.parent} does not exist; expected a folder to "
            "write the record in, inside an existing one")
    assert snapshot(here.parent) == before


def test_a_failed_rewrite_leaves_the_earlier_record_as_it_was(db, here, monkeypatch) -> None:
    # The rewrite the refusals above allow is still all or nothing.
    import errno

    import specfleet.report.record as record

    assert report(db, "--out", "r").exit_code == 0
    before = snapshot(here.parent)

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record, "export_runs", full)
    refused(report(db, "--out", "r"), "r: cannot write the record (No space left on device); "
                                      "expected a folder you can write with room for it")
    assert snapshot(here.parent) == before
