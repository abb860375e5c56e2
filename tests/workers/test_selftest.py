"""A host proves itself when it starts: tiny cache-family models, plain vs lookup, identical."""

from __future__ import annotations

import pytest

from specfleet.engine.runners.toy import InductionModel, RecurrentInductionModel
from specfleet.workers.hardware import HostInfo
from specfleet.workers.selftest import (
    DroppedRollback,
    check_family,
    copy_prompt,
    every_token_prompt,
    run_self_test,
)

TOYS = {"induction": InductionModel, "recurrent": RecurrentInductionModel}


def _toy(family: str, device: str):
    return TOYS[family](vocab=6, earliest=True)  # earliest: lookup proposes what it rejects


def test_copy_prompt_is_seeded_and_copies_itself():
    prompt = copy_prompt(64)
    assert prompt == copy_prompt(64) and len(prompt) == 22
    assert prompt[8:12] == prompt[:4]  # the first copy starts as the segment does


def test_the_every_token_prompt_holds_each_id_once_then_the_copy_prompt():
    prompt = every_token_prompt(96)
    assert sorted(prompt[:96]) == list(range(96)) and prompt[:96] != list(range(96))
    assert prompt[96:] == copy_prompt(96) and prompt == every_token_prompt(96)


@pytest.mark.parametrize("family", ["mamba", "falcon_mamba", "jamba", "qwen3_5_text"])
def test_a_dropped_rollback_is_caught_on_families_that_never_drafted_on_the_copy_prompt(family):
    # Their random-weight replies held no token of the copy prompt: nothing was drafted, so
    # `selftest --break-rollback` said "identical" and their rollback went unchecked.
    from specfleet.engine.runners.tiny_torch import self_test_runner

    test = run_self_test("torch", "cpu", "graded", families=(family,),
                         build=lambda f, d: DroppedRollback(self_test_runner(f, d)))
    assert not test.passed and "CacheRollbackError" in test.reason, test.reason


def test_identical_ids_without_a_rejected_draft_prove_nothing():
    outcome = check_family("induction", _toy("induction", "cpu"), configs={})
    assert (outcome.ok, outcome.detail) == (False, "no draft was rejected, so its rollback is "
                                                   "unproven")


def test_a_sound_runner_passes_every_family_and_refeeds_where_recurrent():
    test = run_self_test("toy", "cpu", "graded", build=_toy, families=tuple(TOYS))
    assert test.passed and test.reason == "" and test.target == "toy/cpu"
    outcomes = {o.family: o for o in test.families}
    assert all(o.detail == "identical" for o in outcomes.values())
    assert outcomes["induction"].refed_tokens == 0 and outcomes["recurrent"].refed_tokens > 0


@pytest.mark.parametrize("family", sorted(TOYS))
def test_a_runner_that_drops_its_rollback_fails_in_one_line(family):
    test = run_self_test("toy", "cpu", "graded", build=lambda f, d: DroppedRollback(_toy(f, d)),
                         families=(family,))
    assert not test.passed
    assert test.reason.startswith(f"{family}: CacheRollbackError: after rolling back")
    assert "\n" not in test.reason


def test_a_family_refused_prompt_lookup_here_passes_on_plain_decoding_and_says_so():
    from specfleet.engine.runners.tiny_torch import tiny_runner

    # As on transformers 5.24, where Mamba's block forward is not its one-token steps.
    test = run_self_test("torch", "cpu", "graded", families=("mamba", "llama"),
                         build=lambda f, d: tiny_runner(f, d, recurrent="refeed"))
    assert test.passed and test.reason == ""
    outcomes = {o.family: o.detail for o in test.families}
    assert outcomes == {"mamba": "plain only: prompt lookup is refused on it here",
                        "llama": "identical"}


def test_an_engine_without_tiny_models_fails_instead_of_raising():
    test = run_self_test("nosuch", "cpu", "graded")
    assert not test.passed and "ModuleNotFoundError" in test.reason and test.families == []


def test_a_failed_target_is_left_out_of_the_host_targets_with_its_reason():
    info = HostInfo(
        name="h1", machine_id="m", os="linux", os_release="6", arch="x86_64", chip="cpu",
        gpu=None, cpu_count=2, memory_gb=8.0, engines={"mlx": ("cpu",), "torch": ("cpu",)},
        selftest={"torch/cpu": {"passed": False, "reason": "qwen3_next: ids differ"},
                  "mlx/cpu": {"passed": True, "reason": ""}},
    )
    assert [t.label for t in info.targets()] == ["h1/mlx/cpu"]
    assert info.failed_targets() == {"torch/cpu": "qwen3_next: ids differ"}
    as_dict = info.to_dict()
    assert as_dict["targets"] == ["h1/mlx/cpu"]
    assert as_dict["failed_targets"] == {"torch/cpu": "qwen3_next: ids differ"}
    # The self-test's timings never change what makes a host's numbers comparable.
    import dataclasses

    assert dataclasses.replace(info, selftest={}).fingerprint == info.fingerprint
