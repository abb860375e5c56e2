"""This user's folders: the platform's cache and data dirs, `SPECFLEET_HOME` and the runtime dir.

Each is computed here, once, from the variables `settings.py` declares (`SPECFLEET_HOME`,
`SPECFLEET_RUNTIME_DIR`) and the platform's defaults (platformdirs); a module that keeps a
file of its own joins a name onto one of them. Outside the layers like `settings.py`: every
layer reads it, and it imports only platformdirs, `settings`, `userfiles` and `errors`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import platformdirs

from specfleet.errors import UserError
from specfleet.settings import HOME, RUNTIME_DIR
from specfleet.userfiles import check_folder_path

APP_NAME = "specfleet"


def user_cache_dir() -> Path:
    """The platform's user cache dir for specfleet (`~/.cache/specfleet` on Linux)."""
    return Path(platformdirs.user_cache_dir(APP_NAME))


def user_data_dir() -> Path:
    """The platform's user data dir for specfleet (`~/.local/share/specfleet` on Linux)."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def specfleet_home() -> Path:
    """`SPECFLEET_HOME`, else the user cache dir: converted bundled models, the fleet node
    record and the supervisor log.

    Raises:
        UserError: `SPECFLEET_HOME` names something that is not a folder.
    """
    home = HOME.read()
    if home is not None:
        check_folder_path(home, HOME.name)  # a file there fails every later mkdir
        return home
    return user_cache_dir()


def runtime_dir() -> Path:
    """This user's private runtime directory (`SPECFLEET_RUNTIME_DIR`, else
    `/tmp/specfleet-UID`): machine locks, kept results, the embedded Ray dir. Created 0700 if
    missing.

    `/tmp` itself rather than `$TMPDIR`: every process of the user must find the same lock.

    Raises:
        UserError: the path exists but is a link, not a directory, or not ours; or the
            variable names a folder of ours that others may enter (its mode is left alone);
            or it cannot be made or written.
    """
    uid = os.getuid()
    given = RUNTIME_DIR.read()
    path = Path(given or f"/tmp/specfleet-{uid}")
    label = f"{RUNTIME_DIR.name}: {path}" if given else str(path)
    made = False
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        pass
    except OSError as err:
        where = f"{RUNTIME_DIR.name} {path}" if given else f"the runtime directory {path}"
        advice = "a path whose folder exists" if given else f"{RUNTIME_DIR.name} set elsewhere"
        raise UserError(f"{where}: cannot be created ({err.strerror}); expected "
                        f"{advice}") from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        advice = ("expected a folder of your own, or a path not there yet" if given else
                  f"remove it or set {RUNTIME_DIR.name}")
        raise UserError(f"{label} is not a private directory of this user (a link, a file or "
                        f"someone else's); {advice}")
    mode = stat.S_IMODE(info.st_mode)
    if given and not made:  # the user's own folder (`/tmp` itself, say): never re-mode it
        if mode & 0o077 or mode & 0o700 != 0o700:  # a setgid bit (2700) is still private
            raise UserError(f"{label} has mode {mode:04o}; expected a folder of your own with "
                            "mode 0700 (it holds locks and kept results), or a path not there "
                            "yet")
    elif mode != 0o700:
        os.chmod(path, 0o700)
    if not os.access(path, os.W_OK):  # a read-only mount (permission bits say nothing to root)
        raise UserError(f"{label} cannot be written (a read-only file system?); expected a "
                        f"folder this user can write" + ("" if given else
                                                         f", or {RUNTIME_DIR.name} set"))
    return path
