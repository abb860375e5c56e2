"""`fleet join HEAD` with a token the head refuses: one line saying the token is refused and
which file to replace, as `fleet status` says it; not "cannot read versions ... expected the
HOST:PORT `specfleet fleet up` printed", which sent the user to check a right address.

The head's GCS client is replaced by a stand-in raising what Ray raises for a wrong token."""

from __future__ import annotations

import pytest
from ray.exceptions import AuthenticationError

from specfleet.cluster import headversions, membership
from specfleet.errors import UserError


def test_join_with_a_token_the_head_refuses_names_the_token(monkeypatch, tmp_path):
    token = tmp_path / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)

    def refusing_client(address):
        raise AuthenticationError("RPC error: InvalidAuthToken: Authentication token is "
                                  "missing or incorrect.")

    monkeypatch.setattr(headversions, "connect_error", lambda address, timeout_s: None)
    monkeypatch.setattr(headversions, "head_client", refusing_client)
    with pytest.raises(UserError) as err:
        membership.read_head_versions("10.0.0.1:6379")
    assert str(err.value) == (f"10.0.0.1:6379 (from HEAD): the Ray head there refuses the "
                              f"token at {token}: copy the head's token file there")
