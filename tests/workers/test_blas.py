"""OpenBLAS for MLX's CPU backend: the core type comes from the CPU's own flags."""

from __future__ import annotations

import platform

import pytest

from specfleet.workers import blas

SKYLAKE = "flags\t\t: fpu sse avx avx2 fma avx512f avx512bw avx512vl\n"
HASWELL = "flags\t\t: fpu sse avx avx2 fma\n"


def test_the_core_type_is_the_best_every_cpu_supports():
    assert blas.core_type(SKYLAKE) == "SKYLAKEX"
    assert blas.core_type(HASWELL) == "HASWELL"
    assert blas.core_type(SKYLAKE + HASWELL) == "HASWELL"  # one core without AVX-512
    assert blas.core_type("flags\t: fpu sse\n") is None
    assert blas.core_type("model name: ?\n") is None


@pytest.mark.skipif(platform.system() != "Linux" or not blas.LIBRARY.exists(),
                    reason="needs Debian's libopenblas0-pthread (make test installs it)")
def test_the_preload_is_offered_once_and_can_be_turned_off():
    env = blas.openblas_env({"LD_PRELOAD": "/x/other.so"})
    assert env["LD_PRELOAD"] == f"{blas.LIBRARY}:/x/other.so"
    assert env["OPENBLAS_CORETYPE"] in {name for name, _ in blas.CORE_TYPES}
    assert blas.openblas_env({"LD_PRELOAD": env["LD_PRELOAD"]}) == {}  # already preloaded
    assert blas.openblas_env({blas.SWITCH_ENV: "0"}) == {}
    assert blas.openblas_env({"OPENBLAS_CORETYPE": "HASWELL"})["OPENBLAS_CORETYPE"] == "HASWELL"


@pytest.mark.skipif(platform.system() != "Linux" or not blas.LIBRARY.exists(),
                    reason="needs Debian's libopenblas0-pthread (make test installs it)")
def test_ray_nodes_started_by_fleet_up_or_join_inherit_the_preload(monkeypatch):
    """Only a node that runs MLX without torch gets it: torch's own BLAS calls would go to
    OpenBLAS too (a torch step 2-4x slower here)."""
    from specfleet.cluster.membership import _mlx_only, start_env

    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv(blas.SWITCH_ENV, raising=False)
    assert start_env("linux", mlx_only=True)["LD_PRELOAD"] == str(blas.LIBRARY)
    assert "LD_PRELOAD" not in start_env("linux")
    assert _mlx_only({"mlx": ("cpu",), "torch": ("cpu",)}, ["mlx"])
    assert not _mlx_only({"mlx": ("cpu",), "torch": ("cpu",)}, None)
    assert _mlx_only({"mlx": ("cpu",)}, None)
    monkeypatch.setenv(blas.SWITCH_ENV, "0")
    assert "LD_PRELOAD" not in start_env("linux", mlx_only=True)
