"""The web API's runs are `specfleet results -o json`'s records: one vocabulary for a script
reading either (`prompt_name`, `host`/`engine`/`device`, never a second set of names)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from specfleet.cli.main import app
from tests.serve.seed import BASE, JOB


def _results_json(url: str, *filters: str) -> list[dict]:
    said = CliRunner().invoke(app, ["results", *filters, "--db", url, "-o", "json"])
    assert said.exit_code == 0, said.output
    return json.loads(said.stdout)


def test_a_matrixs_runs_api_answers_the_records_results_writes(client, seeded_url):
    # It named them `prompt` and `target` where `results -o json` has `prompt_name`, `host`,
    # `engine` and `device`: a script reading both needed two vocabularies.
    api = client.get(f"/api/matrices/{BASE}/runs").json()["runs"]
    assert api == _results_json(seeded_url, "--matrix", BASE)
    assert {"prompt_name", "host", "engine", "device"} <= set(api[0])


def test_a_jobs_replies_api_answers_the_records_results_writes(client, seeded_url):
    api = client.get(f"/api/jobs/{JOB}").json()["runs"]
    assert api == _results_json(seeded_url, "--job", JOB)


def test_the_runs_page_still_shows_target_prompt_and_finish_time(client):
    page = client.get(f"/matrices/{BASE}/runs").text
    first = page.split("<tbody>")[1].split("</tr>")[0]
    assert "<td>mac1/mlx/metal</td><td>m1</td><td>edit_fn</td>" in first
    assert "<td>2026-11-01 12:00:01</td>" in first
