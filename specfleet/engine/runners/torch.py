"""PyTorch / transformers runner: `AutoModelForCausalLM`, `DynamicCache`, CUDA pipelining.

Plain decoding here means transformers' own greedy `generate`: one forward of the whole
prompt computing only the last row (`logits_to_keep=1`), then one-token forwards. The
runner does exactly that, so the first token and caches equal plain decoding. Rollback is
exact on every cache layer class transformers uses for causal LMs (full, sliding-window,
linear-attention / state-space and their combinations; `torch_rollback.py`); any other is
refused at load.

On CUDA the one-token step is pipelined the way MLX does it: `argmax` stays on the device,
`submit` copies it non-blocking into pinned host memory and records an event, and
`read_tokens` waits on that event only, so the host reads token n while step n+1 runs. On
CPU (and MPS) every call is synchronous and `submit` does nothing.

What a device is to torch lives here only: `torch_device` places a model and its tensors
(`tiny_torch`'s too) and `peak_memory` asks the device's allocator, so code that builds or
reports through a runner never names a device.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from specfleet.engine.kinds import ENGINE_DEVICES
from specfleet.engine.runners.base import RollbackKind, UnsupportedModelError
from specfleet.engine.runners.common import (
    TokenizerText,
    check_chat_template,
    eos_id_set,
    process_peak_rss,
)
from specfleet.engine.runners.torch_rollback import (
    CacheRollback,
    RecurrentRollback,
    layer_kinds,
    lookup_refusal,
    recurrent_rollback_for,
)
from specfleet.errors import UserError

if TYPE_CHECKING:
    from transformers import DynamicCache

    from specfleet.engine.peers import PeerCall, PeerGeneration

DEVICES = ("auto", *ENGINE_DEVICES["torch"])


@dataclass
class TorchTokens:
    """A device tensor of token ids plus, once submitted, its pinned host copy and event."""

    ids: torch.Tensor
    host: torch.Tensor | None = None
    event: Any = field(default=None, repr=False)


def resolve_device(device: str) -> str:
    """Map "auto" to cuda, then mps, then cpu; refuse a device this host lacks."""
    if device not in DEVICES:
        raise UserError(f"--device for torch must be one of {', '.join(DEVICES)}, got {device!r}")
    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if device == "auto":
        return "cuda" if cuda else "mps" if mps else "cpu"
    if (device == "cuda" and not cuda) or (device == "mps" and not mps):
        raise UserError(f"--device {device}: torch {torch.__version__} here cannot use it")
    return device


def torch_device(device: str) -> torch.device:
    """Where torch places a model and its tensors for a resolved device (`resolve_device`)."""
    return torch.device(device)


# The oldest transformers the runner works with (pyproject's bound says the same): 5.24 is the
# first whose models take `cache=` and whose cache has every layer class `torch_rollback` knows.
MIN_TRANSFORMERS = (5, 24)


def require_transformers(version: str) -> None:
    """Refuse a transformers older than `MIN_TRANSFORMERS` in one line (its models would
    ignore the runner's cache and build their own)."""
    from packaging.version import Version

    if Version(version).release[:2] < MIN_TRANSFORMERS:
        wanted = ".".join(map(str, MIN_TRANSFORMERS))
        raise UserError(f"the torch engine needs transformers >= {wanted}, found {version}; "
                        f"expected pip install -U 'transformers>={wanted}'")


class _HoldRecords:
    """A handler filter that keeps every record it sees, once (each handler asks), and lets
    none through."""

    def __init__(self, held: list) -> None:
        self.held = held

    def filter(self, record) -> bool:
        if not self.held or self.held[-1] is not record:
            self.held.append(record)
        return False


class TorchRunner(TokenizerText):
    """One transformers causal LM and its `DynamicCache` on one device (a `Runner`).

    Attributes:
        tokenizer: the Hugging Face tokenizer loaded with the model (`IdsOnlyTokenizer` for
            a runner driven by token ids, `tiny_torch`).
        model: the `PreTrainedModel`.
        rollback_kind: "refeed" when a cache layer is recurrent and the installed
            transformers cannot record a block's recurrent states (5.24), else "trim".
    """

    engine = "torch"
    trimmable = True  # load refuses any cache layer it cannot roll back exactly
    state_layout = "external"

    def __init__(self, model, tokenizer, device: str,
                 recurrent: RecurrentRollback | None = None) -> None:
        """`recurrent`: how recurrent layers go back ("record" or "refeed"); None: the way
        for this model type and the installed transformers (`recurrent_rollback_for`)."""
        import transformers
        from transformers import DynamicCache

        require_transformers(transformers.__version__)
        self.model = model
        self.device = device
        self._torch_device = torch_device(device)
        self._gpu = self._torch_device.type == "cuda"  # pipelined steps, an allocator of its own
        self._cache: DynamicCache | None = DynamicCache(config=model.config)
        decoder = model.config.get_text_config(decoder=True)
        kinds = layer_kinds(self._cache, decoder.model_type)
        recurrent = recurrent or recurrent_rollback_for(decoder.model_type)
        self._rollback = CacheRollback(kinds, recurrent)
        self.rollback_kind: RollbackKind = self._rollback.rollback_kind
        # Plain decoding works on every known layer kind; prompt lookup only where exact.
        self.lookup_refusal = lookup_refusal(kinds, decoder.model_type, recurrent)
        self.trimmable = self.lookup_refusal is None
        self.tokenizer = tokenizer
        self.vocab_size = int(model.config.get_text_config().vocab_size)
        self.eos_ids = eos_id_set(model.generation_config.eos_token_id, tokenizer.eos_token_id)
        self._held_logs: list = []  # transformers' log records of the load-time probe
        self._refuse_state_outside_cache(decoder.model_type)

    def _refuse_state_outside_cache(self, model_type: str) -> None:
        """Feed one token at load: a model that keeps its state in its own modules (RWKV,
        RecurrentGemma) leaves transformers' cache empty, and would fail mid-reply, not here.
        What transformers logs during that forward (a slow-kernel fallback, said once a
        process) is held back and said at the first real prefill, as without this probe: a
        refusal before it (this one, or prompt lookup's) stays one line."""
        import logging

        library = logging.getLogger("transformers")
        held: list[logging.LogRecord] = []
        hold = _HoldRecords(held)
        for handler in library.handlers:
            handler.addFilter(hold)
        try:
            self.prefill([0])
        except UnsupportedModelError as err:
            raise UnsupportedModelError(
                f"{model_type} keeps its state outside transformers' cache ({err}), so the "
                "torch engine cannot run it, plain or with prompt lookup; expected a model "
                "whose layers all use transformers' cache (README, \"Models\")") from None
        finally:
            for handler in library.handlers:
                handler.removeFilter(hold)
            self.reset()
        self._held_logs = held

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> TorchRunner:
        """Load a Hugging Face model folder.

        Args:
            path: folder with config.json, weights and tokenizer.
            device: "auto", "cpu", "cuda" or "mps".

        Returns:
            TorchRunner, float32 on CPU, the checkpoint's dtype on accelerators.

        Raises:
            ValueError: the library refuses the folder (a config field of the wrong type, a
                damaged weights file, an unknown model type, a chat template that does not
                render).
        """
        from huggingface_hub.errors import StrictDataclassError
        from safetensors import SafetensorError
        from transformers import AutoModelForCausalLM, AutoTokenizer

        resolved = resolve_device(device)
        dtype = torch.float32 if resolved == "cpu" else "auto"
        # What transformers and torch raise on a folder they cannot read: a config field of
        # the wrong type or value (a negative size, no heads, an unknown dtype), a weights
        # file damaged or of other shapes, a pickle that is no checkpoint.
        refusals = (StrictDataclassError, SafetensorError, RuntimeError, ArithmeticError,
                    AttributeError, pickle.UnpicklingError)
        try:
            with _quiet_load_report():
                # With output_loading_info it returns (model, what loaded), which it does not type.
                # Straight onto the device: loaded on the CPU and then moved, a GB10's or a
                # Mac's unified memory would hold the weights twice at once.
                loaded: Any = AutoModelForCausalLM.from_pretrained(
                    str(path), dtype=dtype, output_loading_info=True,
                    device_map=torch_device(resolved))
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except refusals as err:
            raise ValueError(_refusal_text(err)) from None
        model, loading = loaded
        _refuse_partial_weights(loading)
        check_chat_template(tokenizer)
        model.to(torch_device(resolved)).eval()
        return cls(model, tokenizer, resolved)

    def weight_bytes(self) -> int:
        """Bytes of the weights as loaded: every parameter and persistent buffer, a tensor
        shared by two names (tied embeddings) counted once; what one plain step reads."""
        tensors = {id(t): t for t in self.model.state_dict(keep_vars=True).values()}
        return sum(t.numel() * t.element_size() for t in tensors.values())

    def generate_peer(self, prompt: Sequence[int], call: PeerCall) -> PeerGeneration:
        """transformers' `generate` (hf, hf-lookup) on this runner's model, or llama.cpp's
        (llama.cpp, llama.cpp-lookup) on its GGUF with this runner's threads; greedy, timed
        (`engine/peers.py`)."""
        from specfleet.engine.peers import PEER_KINDS

        if PEER_KINDS[call.peer].gguf and call.gguf is not None:
            from specfleet.engine.runners.llamacpp_peers import llama_cpp_generate

            return llama_cpp_generate(call.gguf, self.eos_ids, prompt, call,
                                      call.threads or torch.get_num_threads(),
                                      self.device != "cpu")
        from specfleet.engine.runners.torch_peers import hf_generate

        return hf_generate(self.model, self.eos_ids, prompt, call)

    # -- Runner protocol ------------------------------------------------------------
    def reset(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.model.config)
        self._rollback.reset()

    @torch.inference_mode()
    def prefill(self, prompt: Sequence[int]) -> torch.Tensor:
        assert self._cache is not None  # reset() has run since __init__
        if self._held_logs:
            self._say_held_logs()
        self._rollback.before_forward(self._cache, None)
        # transformers' generate computes only the last row at prefill: same kernels here.
        logits = self._run([int(t) for t in prompt], logits_to_keep=1)
        self._rollback.fed(len(prompt), undoable=False)
        # A model that keeps its state elsewhere (or ignores `cache=`) leaves layers empty.
        self._rollback.check(self._cache, "after a prefill", error=UnsupportedModelError)
        return logits

    def _say_held_logs(self) -> None:
        import logging

        held, self._held_logs = self._held_logs, []
        for record in held:
            logging.getLogger(record.name).handle(record)

    @torch.inference_mode()
    def forward(self, tokens: Sequence[int] | TorchTokens) -> torch.Tensor:
        assert self._cache is not None  # reset() has run since __init__
        ids: list[int] | torch.Tensor
        if isinstance(tokens, TorchTokens):
            block, ids = None, tokens.ids.reshape(1, -1)
        else:
            block = ids = [int(t) for t in tokens]
        self._rollback.before_forward(self._cache, block)
        logits = self._run(ids)
        self._rollback.fed(logits.shape[0])
        return logits

    def _run(self, ids: list[int] | torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        if isinstance(ids, list):
            ids = torch.tensor([ids], dtype=torch.long, device=self._torch_device)
        out = self.model(input_ids=ids, cache=self._cache, use_cache=True,
                         logits_to_keep=logits_to_keep)
        return out.logits[0]

    def argmax(self, logits: torch.Tensor) -> TorchTokens:
        # torch.argmax returns the first maximal index: ties go to the lowest id.
        return TorchTokens(torch.argmax(logits, dim=-1))

    def submit(self, tokens: TorchTokens) -> None:
        if not self._gpu or tokens.event is not None:
            return
        tokens.host = torch.empty(tokens.ids.shape, dtype=tokens.ids.dtype, pin_memory=True)
        tokens.host.copy_(tokens.ids, non_blocking=True)
        tokens.event = torch.cuda.Event()
        tokens.event.record()

    def read_tokens(self, tokens: TorchTokens) -> list[int]:
        if tokens.event is not None:
            tokens.event.synchronize()  # waits for this copy only, not the step queued after it
            assert tokens.host is not None  # submit sets host with event
            return [int(t) for t in tokens.host.tolist()]
        return [int(t) for t in tokens.ids.tolist()]

    def read_row(self, logits: torch.Tensor, row: int) -> np.ndarray:
        return logits[row].detach().to("cpu", torch.float64).numpy()

    @torch.inference_mode()
    def rollback(self, n: int) -> int:
        if n == 0:
            return 0
        assert self._cache is not None  # reset() has run since __init__
        kept = self._rollback.undo(self._cache, n)
        if kept:
            self._run(kept)  # rows unused: this only rebuilds the states of the kept tokens
            self._rollback.fed(len(kept), undoable=False)
            self._rollback.check(self._cache, f"after feeding {len(kept)} kept tokens again")
        return len(kept)

    def cache_len(self) -> int:
        assert self._cache is not None  # reset() has run since __init__
        first = self._rollback.first_attention
        if first is None:  # no layer counts positions by its keys (e.g. Mamba 2)
            return self._rollback.positions
        # Not layer 0's count when that is recurrent: since 5.25 a tensor, a device read.
        return int(self._cache.get_seq_length(first))

    def clear_allocator_cache(self) -> None:
        """Nothing: torch's caching allocators reuse freed blocks, and emptying one waits for
        the device (CUDA's `empty_cache` synchronizes), stalling the pipelined steps the loop
        calls this between. A model's memory is returned when it is evicted
        (`workers/loaded.py`)."""

    def peak_memory(self) -> tuple[float, str]:
        if self._gpu:
            return torch.cuda.max_memory_allocated() / 1e9, f"{self.device} peak allocated"
        if self.device == "mps":  # its buffers are not in the process's RSS
            # MPS keeps no peak; its allocator keeps freed blocks, so what it holds now is
            # about its peak (nothing empties it during a reply).
            return torch.mps.driver_allocated_memory() / 1e9, "mps allocated"
        return process_peak_rss()


@contextlib.contextmanager
def _quiet_load_report() -> Iterator[None]:
    """transformers' multi-line LOAD REPORT (missing or unexpected weights) stays off stderr:
    `_refuse_partial_weights` says it in one line."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def _refusal_text(err: Exception) -> str:
    """A library's refusal on one line; the size mismatch that points at a report
    `_quiet_load_report` kept off stderr says what it found instead."""
    text = str(err)
    if isinstance(err, pickle.UnpicklingError):  # torch's note on weights_only runs 8 lines
        return "a weights file torch will not unpickle; expected *.safetensors"
    if "ignore_mismatched_sizes" in text:
        return ("weights of other shapes than the config.json describes; expected a "
                "config.json and weights of the same model")
    return " ".join(text.split()) or type(err).__name__  # e.g. a field and its TypeError


def _refuse_partial_weights(loading: dict) -> None:
    """Refuse a checkpoint whose weights do not fill the model its config.json describes (a
    layer count edited, another model's weights): transformers initialises what is missing at
    random and drops what is left over, and the replies would be noise. MLX refuses it too."""
    for kind, what in (
        ("missing_keys", "weights the config.json describes are missing from the weights files"),
        ("unexpected_keys", "weights in the weights files are not in the model the config.json "
                            "describes"),
    ):
        keys = sorted(loading.get(kind) or [])
        if keys:
            raise ValueError(f"{len(keys)} {what} (e.g. {keys[0]}); expected a config.json and "
                             "weights of the same model")
