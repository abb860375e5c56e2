"""User-facing errors: one line naming the file, field or flag and what is expected.

Raise `UserError` (or a subclass) for anything a user can fix; the CLI prints its message
as one line on stderr and exits with status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; `str(err)` is the whole message, one line."""

    exit_code = 2
