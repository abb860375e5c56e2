"""The built wheel works on its own: installed into a fresh venv outside the checkout (no
editable install, no PYTHONPATH), it finds its packaged demo, prompts and model aliases.

Only third-party dependencies come from this interpreter's site-packages (a `.pth` line, so
the test needs no network and no minutes of installs); specfleet itself comes from the wheel,
and the test checks that it does.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(the fresh venv's bin folder, an environment without the checkout, a working dir)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Nothing may point at the checkout (pip would take a specfleet on PYTHONPATH for installed).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "dist"), str(REPO)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("specfleet-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False)
    py = env_dir / "bin" / "python"
    own_site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                    "['purelib'])"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
         "-q", str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    # Third-party deps only, after the install (pip would take the checkout's editable
    # specfleet for installed): appended after the venv's own site-packages, whose wins.
    (own_site / "thirdparty.pth").write_text(site.getsitepackages()[0] + "\n")
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    work = tmp / "elsewhere"
    work.mkdir()
    return env_dir / "bin", env, work


def run(installed, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    bin_dir, env, work = installed
    return subprocess.run([str(bin_dir / "specfleet"), *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_specfleet_is_imported_from_the_wheel(installed) -> None:
    bin_dir, env, work = installed
    where = subprocess.run([str(bin_dir / "python"), "-c", "import specfleet; print(specfleet"
                            ".__file__)"], cwd=work, env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(bin_dir.parent)), where.stdout + where.stderr
    version = run(installed, "--version")
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(r"specfleet \d+\.\d+\.\d+\S*\n", version.stdout)  # no checkout: no git


def test_the_packaged_demo_validates_and_models_list(installed) -> None:
    demo = run(installed, "matrix", "validate", "demo")
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.startswith("demo: ok: 1 model x 2 prompts x 3 arms x 5 repeats: 30 runs "
                                  "per torch target, 10 per mlx target")
    models = run(installed, "models", "list")
    assert models.returncode == 0, models.stderr
    assert re.search(r"^smollm2-135m\s+torch\s+yes", models.stdout, re.MULTILINE), models.stdout


@pytest.mark.torch
def test_a_short_generate_with_the_bundled_model(installed) -> None:
    reply = run(installed, "generate", "-m", "smollm2-135m", "--engine", "torch", "-n", "4",
                "--prompt-file", "story", "--prompt-lookup", "--no-warm-up")
    assert reply.returncode == 0, reply.stderr
    assert re.search(r"^\[Generated \d tokens in ", reply.stdout, re.MULTILINE), reply.stdout
