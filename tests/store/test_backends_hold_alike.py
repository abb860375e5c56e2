"""What a worker returns is stored alike on SQLite and PostgreSQL: text PostgreSQL cannot hold
(a NUL) or no UTF-8 encodes (a lone surrogate), non-finite floats in JSON columns; and a
PostgreSQL URL with an unescaped `@` in its password is refused without echoing it."""

from __future__ import annotations

import math

import pytest

from specfleet.errors import UserError
from specfleet.store.engine import display_raw, resolve_url
from tests.store.factory import grid, result


def test_a_reply_and_an_error_holding_nul_or_a_lone_surrogate_are_stored(store):
    done, failed, stopped = grid(repeats=1, arms=("plain", "graded", "auto"))
    store.create_matrix("m", {}, [done, failed, stopped])
    reply = result(done, text="ab\x00\x00 \ud800!").model_copy(
        update={"throttle_reason": "clock\x00", "error": None})
    assert store.record_result(reply) is True
    assert store.record_result(reply) is False  # the same result again: still a no-op
    store.mark_failed(failed.run_key, "RuntimeError: no file /m/\udcff\x00")
    store.mark_interrupted(stopped.run_key, "lost\x00")
    rows = {r.run_key: r for r in store.runs()}
    assert rows[done.run_key].status == "done"
    assert rows[done.run_key].output_text == "ab\ufffd\ufffd \ufffd!"
    assert rows[done.run_key].throttle_reason == "clock\ufffd"
    assert rows[done.run_key].token_ids == [5, 6, 7]  # the exact reply is in its tokens
    assert rows[failed.run_key].error == "RuntimeError: no file /m/\ufffd\ufffd"
    assert (rows[stopped.run_key].status, rows[stopped.run_key].error) == ("interrupted", "lost\ufffd")


def test_non_finite_floats_in_json_columns_are_stored_as_null(store):
    run = grid(repeats=1, arms=("plain",))[0]
    store.create_matrix("m", {}, [run])
    measured = result(run).model_copy(update={
        "conditions": {"before": {"temp_c": math.nan}, "after": {"power_w": math.inf}},
        "engine_config": {"scale": -math.inf}})
    assert store.record_result(measured) is True
    stored = store.runs()[0]
    assert stored.conditions == {"before": {"temp_c": None}, "after": {"power_w": None}}
    assert stored.engine_config == {"scale": None}


@pytest.mark.parametrize("raw", [
    "postgresql://u:p@ss:w%rd/x#y?z@127.0.0.1:5432/db",  # unparsable
    "postgresql://u:se@cret@127.0.0.1:5432/db",  # read as host 'cret@127.0.0.1'
    "postgresql://u:se@cr/et@127.0.0.1:5432/db",  # read as host 'cr', database 'et@...'
])
def test_an_unescaped_at_in_a_password_is_refused_without_echoing_it(raw):
    with pytest.raises(UserError) as err:
        resolve_url(raw)
    message = str(err.value)
    assert message.startswith("--db: ") and "\n" not in message
    for part in ("ss:w", "cret", "cr/et", "et@"):
        assert part not in message, message
    assert "%40" in message


def test_display_raw_hides_a_password_up_to_the_last_at():
    assert display_raw("postgresql://u:se@cret@h:5/db") == "postgresql://u:***@h:5/db"
    assert display_raw("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert display_raw("postgresql://u@h/db") == "postgresql://u@h/db"
    assert display_raw("./runs.db") == "./runs.db"


def test_an_escaped_at_and_a_database_name_with_one_still_parse():
    url = resolve_url("postgresql://u:se%40cret@h:5/my%40db")
    assert (url.password, url.host, url.database) == ("se@cret", "h", "my@db")
    url = resolve_url("postgresql://u@h/db?application_name=a@b")
    assert url.query == {"application_name": "a@b"}
