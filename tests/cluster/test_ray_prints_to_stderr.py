"""What Ray's driver prints by itself goes to stderr once a command of ours connects: its error
listener printed `(raylet) The node with node id: ... has been marked dead ...` to stdout while
a host was being lost, ahead of the JSON of `fleet status --json` (which `jq` then refused).

Ray's own print function is called as its error-listener thread calls it; no Ray starts."""

from __future__ import annotations

from ray._private import worker as ray_worker

from specfleet.cluster.rayinit import ray_connecting

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


WORKER_DIED = ("A worker died or was killed while executing a task by an unexpected system "
               "error. To troubleshoot the problem, check the logs for the dead worker. Lease "
               "ID: 0000 Worker ID: 73b5 Node ID: 9dd4 Worker IP address: 127.0.0.1 Worker "
               "port: 38125 Worker PID: 23080 Worker exit type: SYSTEM_ERROR Worker exit "
               "detail: Worker unexpectedly exits with a connection error code 2. End of "
               "file. Some common causes include: (1) the process was killed by the OOM "
               "killer due to high memory usage, (2) ray stop --force was called.")


def test_the_raylets_messages_are_one_plain_line_each(capsys, monkeypatch, tmp_path):
    # A worker's crash printed Ray's coloured `(raylet)` paragraph of ids and common causes
    # (one per worker, the last after the command's own final line).
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(ray_worker, "print_to_stdstream", ray_worker.print_to_stdstream)
    with ray_connecting():
        pass
    dead = {**NODE_DEAD, "lines": [NODE_DEAD["lines"][0] + " because the detector has missed "
                                   "too many heartbeats from it. This can happen when a \t(1) "
                                   "raylet crashes unexpectedly (OOM, etc.) \n\t(2) ..."]}
    ray_worker.print_to_stdstream(dead, ignore_prefix=False)
    ray_worker.print_to_stdstream({"lines": [WORKER_DIED], "pid": "raylet", "is_err": False},
                                  ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "ray: The node with node id: 5d93 has been marked dead because the detector has "
        "missed too many heartbeats from it.",
        "ray: A worker died or was killed while executing a task by an unexpected system error "
        "(pid 23080, SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2. "
        "End of file.)"]
