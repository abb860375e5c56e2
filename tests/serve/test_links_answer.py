"""Every link the pages of the seeded store show answers, and the history page's links keep
the query the visitor asked for."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

from tests.serve.seed import EVIL

HREF = re.compile(r'href="([^"]+)"')


def _links(html: str) -> list[str]:
    return [unescape(h) for h in HREF.findall(html) if h.startswith("/")]


def test_every_link_on_every_page_answers(client):
    seen, todo, broken = set(), ["/matrices", "/jobs", "/fleet"], []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        answer = client.get(path)
        if answer.status_code != 200:
            broken.append((path, answer.status_code, answer.text[:120]))
        elif answer.headers["content-type"].startswith("text/html"):
            todo.extend(link for link in _links(answer.text) if link not in seen)
    assert not broken
    assert len(seen) > 30  # every matrix, run list, history, job and download


def test_history_without_a_target_links_all_points_without_one(client):
    # The "all of them" link took the last plotted series' target: one target's points only,
    # or a 400 where the stored host holds a '/' (the seed's `h<b>x</b>`).
    page = client.get("/history?model=m1&prompt=p%3Ci%3E1%3C%2Fi%3E&arm=graded")
    assert page.status_code == 200
    (all_href,) = [h for h in _links(page.text) if "last=all" in h]
    assert parse_qs(urlsplit(all_href).query) == {
        "model": ["m1"], "prompt": ["p<i>1</i>"], "arm": ["graded"], "last": ["all"]}
    assert client.get(all_href).status_code == 200
    assert EVIL in client.get(all_href).text


def test_every_paged_api_answer_counts_what_its_page_counts(client):
    # /api/matrices/ID/runs said page and pages but not the run count its page heads with
    # ("12 runs"), unlike /api/matrices, /api/jobs and /api/jobs/ID.
    from tests.serve.seed import BASE, JOB

    for path in ("/matrices", f"/matrices/{BASE}/runs", "/jobs", f"/jobs/{JOB}"):
        listed = client.get("/api" + path).json()
        assert {"page", "pages", "total"} <= set(listed), path
    runs = client.get(f"/api/matrices/{BASE}/runs").json()
    assert runs["total"] == len(runs["runs"]) == 12
    assert f"{runs['total']} runs, plan order" in client.get(f"/matrices/{BASE}/runs").text
