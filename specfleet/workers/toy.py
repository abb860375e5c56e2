"""The "toy" engine of a worker: exact toy runners behind the real worker path.

Ray and scheduler tests (and `bench/scheduler.py`) send RunSpecs whose target engine is
"toy"; the worker then builds a toy runner from the model name instead of loading weights.
Model names: `<kind>[:<ms>ms]`, kind one of

- `script`: `ScriptModel` whose script is the prompt's bytes repeated, so the reply copies
  the prompt (prompt lookup accepts nearly everything);
- `induction`: `InductionModel` over the prompt's bytes mod 6;
- `constant`: `ConstantModel` (always 3, EOS 7) - a reply that loops;
- `fail`: raises `RuntimeError("toy model failed on purpose")` in prefill (a failing run);
- `exit`: ends the worker PROCESS in prefill (a lost worker; use it only through Ray).

`:<ms>ms` sleeps that long in every prefill and forward, e.g. `script:2ms`, so a run takes
a predictable few milliseconds.

With `SPECFLEET_TOY_RUN_LOG=PATH` in a worker's environment, every finished toy run appends
its run key to PATH: fault tests count how often each run really executed.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from specfleet.engine.runners.toy import ConstantModel, InductionModel, ScriptModel, ToyRunner
from specfleet.errors import UserError
from specfleet.settings import TOY_RUN_LOG

TOY_KINDS: tuple[str, ...] = ("script", "induction", "constant", "fail", "exit")
_NAME = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<ms>\d+(?:\.\d+)?)ms)?$", re.ASCII)
_SCRIPT_LEN = 4096
TOY_MAX_MS = 60_000  # a minute per forward: past this a test would only hang


class ToyEngineRunner:
    """A toy runner plus the tokenizer the real runners have (`encode_prompt`, `decode`).

    Delegates the Runner protocol to the wrapped toy model, sleeping `sleep_s` per forward.
    """

    def __init__(self, model: ToyRunner, sleep_s: float = 0.0, fail: str | None = None) -> None:
        self._model = model
        self._sleep_s = sleep_s
        self._fail = fail

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def encode_prompt(self, text: str, chat: bool = True) -> list[int]:
        return [b % self._model.vocab_size for b in text.encode()]

    def decode(self, ids: Sequence[int]) -> str:
        if self._model.vocab_size >= 256:
            return bytes(i % 256 for i in ids).decode(errors="replace")
        return "".join(str(i) for i in ids)

    def prefill(self, prompt: Sequence[int]) -> Any:
        if self._fail == "fail":
            raise RuntimeError("toy model failed on purpose")
        if self._fail == "exit":
            os._exit(17)  # simulates a worker lost mid-run
        self._pause()
        return self._model.prefill(prompt)

    def forward(self, tokens: Sequence[int]) -> Any:
        self._pause()
        return self._model.forward(tokens)

    def _pause(self) -> None:
        if self._sleep_s > 0:
            time.sleep(self._sleep_s)


def parse_toy_model(name: str) -> tuple[str, float]:
    """Split a toy model name into (kind, sleep seconds per forward).

    Raises:
        UserError: the name is not `<kind>[:<ms>ms]` with a known kind.
    """
    match = _NAME.match(name.strip())
    if not match or match.group("kind") not in TOY_KINDS:
        raise UserError(
            f"model {name!r}: a toy model is <kind>[:<ms>ms] with kind one of "
            f"{', '.join(TOY_KINDS)}"
        )
    ms = float(match.group("ms") or 0.0)
    if ms > TOY_MAX_MS:
        raise UserError(f"model {name!r}: a toy model sleeps at most {TOY_MAX_MS} ms a forward")
    return match.group("kind"), ms / 1000.0


def build_toy_runner(name: str, prompt_text: str) -> ToyEngineRunner:
    """A fresh toy runner for model `name`, seeded from the prompt text."""
    kind, sleep_s = parse_toy_model(name)
    if kind == "induction":
        return ToyEngineRunner(InductionModel(), sleep_s)
    if kind == "constant":
        return ToyEngineRunner(ConstantModel(), sleep_s)
    seed = list(prompt_text.encode()) or [0]
    script = (seed * (_SCRIPT_LEN // len(seed) + 1))[:_SCRIPT_LEN]
    fail = kind if kind in ("fail", "exit") else None
    return ToyEngineRunner(ScriptModel(script), sleep_s, fail)


def toy_weights_hash(name: str) -> str:
    """A stable stand-in for the weights hash of a toy model."""
    return hashlib.sha256(f"toy:{parse_toy_model(name)[0]}".encode()).hexdigest()


def log_toy_run(run_key: str) -> None:
    """Append `run_key` to `$SPECFLEET_TOY_RUN_LOG` when set (one write: lines never mix)."""
    path = TOY_RUN_LOG.read()
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, f"{run_key}\n".encode())
    finally:
        os.close(fd)
