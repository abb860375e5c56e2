"""What Ray's driver prints by itself goes to stderr once a command of ours connects: its error
listener printed `(raylet) The node with node id: ... has been marked dead ...` to stdout while
a host was being lost, ahead of the JSON of `fleet status --json` (which `jq` then refused).

Ray's own print function is called as its error-listener thread calls it; no Ray starts."""

from __future__ import annotations

from ray._private import worker as ray_worker

from specfleet.cluster.fleet import ray_connecting

NODE_DEAD = {"lines": ["The node with node id: 5d93 has been marked dead"], "pid": "raylet",
             "is_err": False}


def test_rays_node_dead_message_goes_to_stderr_not_stdout(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "run"))
    # Ray's module is put back after the test, whatever the connect did to it.
    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    with ray_connecting():
        pass
    with ray_connecting():  # a second connect in one process redirects once
        pass
    ray_worker.print_to_stdstream(dict(NODE_DEAD), ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("has been marked dead") == 1
