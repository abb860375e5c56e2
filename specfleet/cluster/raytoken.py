"""The fleet's Ray token: where it lives, made once with mode 0600, and Ray told to use it.

Token auth is on everywhere (`RAY_AUTH_MODE=token`); a client or a joining host needs the
head's token file (or `RAY_AUTH_TOKEN`). See docs/fleet.md.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from specfleet.errors import UserError
from specfleet.userfiles import check_folder_path, read_text

DEFAULT_TOKEN_PATH = Path.home() / ".ray" / "auth_token"


def token_path() -> Path:
    """Where the Ray token lives: `RAY_AUTH_TOKEN_PATH` or Ray's default ~/.ray/auth_token."""
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or DEFAULT_TOKEN_PATH)


def ensure_token(create: bool) -> Path | None:
    """Make sure a Ray token exists (creating it if asked) with mode 0600.

    Returns:
        The token file, or None when the token comes from `RAY_AUTH_TOKEN`.

    Raises:
        UserError: no token and `create` is False (a client or a joining host).
    """
    if os.environ.get("RAY_AUTH_TOKEN"):
        return None
    path = token_path()
    if os.path.lexists(path):
        _check_token_file(path)
    else:
        if not create:
            raise UserError(
                f"no Ray token at {path}: copy the head's token file there (mode 600) "
                "or set RAY_AUTH_TOKEN"
            )
        _write_new_token(path)
    if stat.S_IMODE(path.stat().st_mode) != 0o600:
        path.chmod(0o600)  # Ray writes 0644; the token is the only key to the cluster
    reload_auth()
    return path


def _token_file_name() -> str:
    """What names the token file in messages: the variable that set it, else what it is."""
    return "RAY_AUTH_TOKEN_PATH" if os.environ.get("RAY_AUTH_TOKEN_PATH") else "the Ray token file"


def _write_new_token(path: Path) -> None:
    """A new token at `path`, whole or not at all: written beside it, then linked into place
    (a full disk left an empty token file that refused every later start until removed by
    hand; a token another process linked first is kept)."""
    import secrets
    import tempfile

    named = _token_file_name()
    check_folder_path(path.parent, f"{named} {path}")  # a file in the way ($HOME a file)
    temp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".auth_token-", dir=path.parent)  # mode 0600
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))  # 256 bits, the format `ray get-auth-token` writes
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
    except OSError as err:
        raise UserError(f"{named} {path}: cannot be created ({err.strerror}); expected a "
                        "folder you can write for it (or set RAY_AUTH_TOKEN_PATH or "
                        "RAY_AUTH_TOKEN)") from None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _check_token_file(path: Path) -> None:
    """A token file that is a folder, a pipe or binary would be chmodded, or hang or break
    Ray's own read: refuse it in one line first."""
    named = _token_file_name()
    expected = "the head's token file (one line of text, mode 600)"
    if not read_text(path, f"{named} {path}", expected).strip():
        raise UserError(f"{named} {path}: is empty; expected {expected}")


def enable_token_auth() -> None:
    """Set `RAY_AUTH_MODE=token` for this process and the Ray processes it starts."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    reload_auth()


def reload_auth() -> None:
    """Make this process re-read the auth mode and token (Ray caches both)."""
    # Ray's partial _raylet stub lacks these (they exist at runtime).
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")  # config first, then the token cache (Ray's own test helpers' order)
    AuthenticationTokenLoader.instance().reset_cache()
