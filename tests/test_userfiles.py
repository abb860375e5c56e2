"""Files and folders a user names: only regular files are read, output folders are tried."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specfleet import yamlfiles
from specfleet.errors import UserError
from specfleet.userfiles import (
    MAX_TEXT_BYTES,
    check_folder_path,
    check_output_file,
    check_writable_dir,
    given_path,
    read_text,
)
from specfleet.yamlfiles import read_yaml


def refusal(call, *args) -> str:
    with pytest.raises(UserError) as err:
        call(*args)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_read_text_reads_a_regular_file_with_universal_newlines(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"caf\xc3\xa9\r\nline\n")
    assert read_text(path, "p.txt") == "caf\u00e9\nline\n"


@pytest.mark.timeout(20)  # opening a pipe for reading waits for a writer: fail, not hang
def test_read_text_refuses_a_named_pipe_without_opening_it(tmp_path):
    pipe = tmp_path / "m.yaml"
    os.mkfifo(pipe)
    assert refusal(read_text, pipe, "m.yaml", "a matrix") == \
        "m.yaml: is a named pipe (FIFO); expected a matrix"


@pytest.mark.parametrize("make, kind", [
    (lambda tmp: tmp, "a directory"),
    (lambda tmp: Path(os.devnull), "a character device"),
])
def test_read_text_refuses_other_kinds(tmp_path, make, kind):
    assert refusal(read_text, make(tmp_path), "F") == f"F: is {kind}; expected a regular file"


def test_read_text_names_missing_and_undecodable_files(tmp_path):
    assert refusal(read_text, tmp_path / "none", "none") == "none: no such file"
    (tmp_path / "bin").write_bytes(b"ok\xff")
    assert refusal(read_text, tmp_path / "bin", "X bin", "a YAML mapping") == \
        "X bin: not UTF-8 text (byte 2); expected a YAML mapping"


def test_read_text_drops_a_utf8_byte_order_mark(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"\xef\xbb\xbfhi\r\n")  # Notepad's UTF-8: the mark is no prompt text
    assert read_text(path, "p.txt") == "hi\n"


@pytest.mark.parametrize("content, message", [
    ("hi".encode("utf-16"), "F: not UTF-8 text (byte 0): it starts with a UTF-16 byte-order "
                            "mark; expected a prompt"),
    (b"hello\x00world", "F: a NUL byte at byte 5, so not text; expected a prompt"),
])
def test_read_text_refuses_utf16_and_nul_bytes(tmp_path, content, message):
    (tmp_path / "f").write_bytes(content)
    assert refusal(read_text, tmp_path / "f", "F", "a prompt") == message


def test_read_text_reads_a_bounded_amount(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as out:  # sparse: no disk is spent
        out.truncate(MAX_TEXT_BYTES + 1)
    assert refusal(read_text, path, "huge.yaml") == \
        "huge.yaml: larger than 64 MiB, more than specfleet reads; expected a file of at " \
        "most 64 MiB"


def test_read_yaml_counts_values_as_it_reads(tmp_path, monkeypatch):
    # 50 MB of list items took 4 minutes and ended in a MemoryError traceback: the values
    # were counted only once the whole file was read.
    monkeypatch.setattr(yamlfiles, "MAX_NODES", 10)
    path = tmp_path / "m.yaml"
    path.write_text("name: x\nitems:\n" + "- a\n" * 30)
    assert refusal(read_yaml, path, "m.yaml") == (
        "m.yaml: more than 10 values by line 18; expected a far shorter file")
    path.write_text("name: x\nitems: [a, b, c]\n")
    assert read_yaml(path, "m.yaml") == {"name": "x", "items": ["a", "b", "c"]}


def test_folder_path_under_a_file_is_refused(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert refusal(check_folder_path, afile, "SPECFLEET_HOME") == \
        f"SPECFLEET_HOME: {afile} is a file, not a folder; expected a folder"
    assert refusal(check_folder_path, afile / "sub", "--out") == (
        f"--out: {afile} is a file, not a folder, so {afile / 'sub'} cannot be made inside "
        "it; expected a folder")
    assert check_folder_path(tmp_path / "new" / "deeper", "--out") == tmp_path


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_folder_that_cannot_be_made_is_refused_even_for_root():
    assert refusal(check_writable_dir, Path("/proc/specfleet-x"), "--report-dir") == (
        "--report-dir: cannot create /proc/specfleet-x (making a folder in /proc fails): "
        "No such file or directory; expected a folder you can write")


def test_a_writable_folder_passes_and_nothing_is_left_behind(tmp_path):
    check_writable_dir(tmp_path / "reports" / "m-1", "--out")
    check_writable_dir(tmp_path, "--out")
    assert list(tmp_path.iterdir()) == []


def test_an_output_file_name_taken_by_a_link_loop_or_a_dangling_link(tmp_path):
    loop, dangling, kept = tmp_path / "loop.md", tmp_path / "runs.csv", tmp_path / "a.png"
    loop.symlink_to(loop.name)
    dangling.symlink_to(tmp_path / "nowhere")
    kept.write_bytes(b"old plot")
    assert refusal(check_output_file, loop) == \
        f"{loop}: cannot be written (Too many levels of symbolic links); expected a file to " \
        "replace or nothing"
    assert refusal(check_output_file, dangling) == \
        f"{dangling}: is a dangling link; expected a file to replace or nothing"
    check_output_file(kept)
    check_output_file(tmp_path / "new.md")


def test_a_trailing_slash_on_a_file_is_refused(tmp_path) -> None:
    # Path() drops the slash, so `--prompt-file notes.txt/` read the file where `cat` fails.
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match=r"^--prompt-file '.*notes.txt/': a trailing '/' names a "
                                        r"folder, but .*notes.txt is a file; expected text$"):
        given_path(f"{tmp_path}/notes.txt/", "--prompt-file", "text")
    assert given_path(f"{tmp_path}/", "--out", "a folder") == tmp_path
    assert given_path(f"{tmp_path}/new/", "--out", "a folder") == tmp_path / "new"


def test_a_name_too_long_is_one_line_not_a_traceback(tmp_path) -> None:
    # pathlib's exists/is_file/is_symlink raise ENAMETOOLONG on Python 3.11.
    long = f"{tmp_path}/{'a' * 300}"
    for text in (long, f"{long}/", f"{long}.txt"):
        with pytest.raises(UserError, match=r"^--out: '.*\.\.\.: the name is too long "):
            given_path(text, "--out", "a folder")
    with pytest.raises(UserError, match=r"^--out: .* the name is too long"):
        check_folder_path(Path(long) / "x", "--out")
