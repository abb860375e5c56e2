"""MLX runner on mlx-lm (>= 0.32): its loader, its prompt caches, its prefill chunking.

Plain decoding here means mlx-lm's `generate_step`: the prompt minus its last token in
`PREFILL_STEP_SIZE` chunks (caches evaluated after each), then the last token alone; then
one-token steps, each submitted with `mx.async_eval` before the previous token is read.
The runner repeats exactly that, so the first token and the caches equal plain decoding.

Devices: Metal (Apple Silicon), CUDA (GB10 through `mlx[cuda13]`, other NVIDIA boxes through
`mlx[cuda12]`) and CPU (`mlx[cpu]`), all chosen through `mx`. Only the CPU backend runs on
the machine this was written on; the GPU branches are kept to the few lines below.

Linux CPU speed-up (optional, never required): the `mlx[cpu]` wheel bundles netlib's
reference BLAS; Debian's OpenBLAS, loaded by `specfleet/openblas.py` on the process's first
`import mlx`, made decoding ~3x and prefill ~25x faster here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from specfleet.engine.kinds import ENGINE_DEVICES
from specfleet.engine.runners.base import RollbackKind
from specfleet.engine.runners.common import TokenizerText, check_chat_template, eos_id_set
from specfleet.engine.runners.mlx_caches import PromptCaches, lookup_refusal
from specfleet.errors import UserError

if TYPE_CHECKING:
    from specfleet.engine.peers import PeerCall, PeerGeneration

DEVICES = ("auto", *ENGINE_DEVICES["mlx"])
PREFILL_STEP_SIZE = 2048  # mlx_lm.generate.generate_step's default chunk


def _gpu_kind() -> str | None:
    """Which GPU backend this MLX build has: "metal", "cuda" or None."""
    if mx.metal.is_available():
        return "metal"
    cuda = getattr(mx, "cuda", None)  # the module exists from mlx 0.26 on
    if cuda is not None and cuda.is_available():
        return "cuda"
    return None


def resolve_device(device: str) -> str:
    """Map "auto" to the GPU backend when there is one, else "cpu"; refuse a missing one."""
    if device not in DEVICES:
        raise UserError(f"--device for mlx must be one of {', '.join(DEVICES)}, got {device!r}")
    gpu = _gpu_kind()
    if device == "auto":
        return gpu or "cpu"
    if device != "cpu" and device != gpu:
        raise UserError(f"--device {device}: this MLX build has {gpu or 'no GPU backend'}")
    return device


class MlxRunner(TokenizerText):
    """One mlx-lm model and its prompt caches on one device (a `Runner`).

    Rollback is exact for every cache kind mlx-lm builds (`mlx_caches`): attention layers trim,
    sliding windows drop the block's tail, recurrent layers are restored and the kept tokens fed
    again; every layer is checked after each rollback.

    Attributes:
        tokenizer: mlx-lm's `TokenizerWrapper` (chat template included), or any object with
            `eos_token_id` / `eos_token_ids` for an ids-only model.
        model: the mlx-lm `nn.Module`.
        rollback_kind: "refeed" when some layer is recurrent, else "trim".
    """

    engine = "mlx"
    trimmable = True  # construction refuses any cache kind it cannot roll back
    state_layout = "external"

    def __init__(self, model, tokenizer, device: str) -> None:
        self.model = model
        self.device = device
        self.reset()  # refuses a cache type `mlx_caches` does not know (UnsupportedModelError)
        self.rollback_kind: RollbackKind = "refeed" if self._caches.refeeds else "trim"
        # Plain decoding works on every known cache kind; prompt lookup only where exact.
        model_type = getattr(model, "model_type", None) or type(model).__module__.rsplit(".")[-1]
        self.lookup_refusal = lookup_refusal(self._caches.refeeds, model_type)
        self.tokenizer = tokenizer
        self.vocab_size = _vocab_size(model)
        self.eos_ids = eos_id_set(getattr(tokenizer, "eos_token_ids", None),
                                  getattr(tokenizer, "eos_token_id", None))
        # Our own stream, as mlx-lm's generation_stream: lazy steps queue behind each other.
        self._stream = mx.new_thread_local_stream(mx.cpu if device == "cpu" else mx.gpu)
        wire_recommended()

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> MlxRunner:
        """Load an mlx-lm model folder (MLX checkpoint or plain Hugging Face safetensors).

        Args:
            path: folder with config.json, safetensors and tokenizer.
            device: "auto", "cpu", "metal" or "cuda".

        Returns:
            MlxRunner; on CPU every floating parameter is float32.

        Raises:
            ValueError: the library refuses the folder (no weights, a damaged weights file,
                a config field it cannot use, a chat template that does not render).
        """
        from huggingface_hub.errors import StrictDataclassError
        from mlx_lm import load as mlx_load

        from specfleet.engine.runners.folders import mlx_config_overrides

        resolved = resolve_device(device)
        mx.set_default_device(mx.cpu if resolved == "cpu" else mx.gpu)
        try:
            # The keys a transformers-5 config.json holds only nested (its RoPE base): else
            # mlx-lm takes its defaults and runs another model than torch does.
            model, tokenizer = mlx_load(str(path), model_config=mlx_config_overrides(Path(path)))
        # MLX's reader refusing a damaged weights file; a config field mlx-lm or transformers
        # cannot use (no heads, a vocabulary past int32, an unknown dtype) or one its
        # ModelArgs requires and config.json lacks (a TypeError); a field of the wrong type
        # that transformers' config classes check when mlx-lm loads the tokenizer.
        except (StrictDataclassError, RuntimeError, ArithmeticError, AttributeError,
                TypeError) as err:
            raise ValueError(" ".join(str(err).split()) or type(err).__name__) from None
        check_chat_template(tokenizer)
        if resolved == "cpu":
            _to_float32(model)
        return cls(model, tokenizer, resolved)

    def weight_bytes(self) -> int:
        """Bytes of the weights as loaded (quantized ones at their packed size, scales and
        biases included): what one plain step reads."""
        from mlx.utils import tree_flatten

        arrays = {id(a): a for _, a in tree_flatten(self.model.parameters())}
        return sum(int(a.nbytes) for a in arrays.values())

    def generate_peer(self, prompt: Sequence[int], call: PeerCall) -> PeerGeneration:
        """mlx-lm's `stream_generate` (mlx-lm) on this runner's model, or llama.cpp's
        (llama.cpp, llama.cpp-lookup) on its GGUF, every layer offloaded on a GPU device;
        greedy, timed (`engine/peers.py`)."""
        from specfleet.engine.peers import PEER_KINDS

        if PEER_KINDS[call.peer].gguf and call.gguf is not None:
            from specfleet.engine.runners.llamacpp_peers import llama_cpp_generate

            return llama_cpp_generate(call.gguf, self.eos_ids, prompt, call, call.threads,
                                      self.device != "cpu")
        from specfleet.engine.runners.mlx_peers import mlx_lm_generate

        return mlx_lm_generate(self.model, self.tokenizer, self.stream, prompt, call)

    # -- Runner protocol ------------------------------------------------------------
    def reset(self) -> None:
        self._caches = PromptCaches(make_prompt_cache(self.model))
        self._cache = self._caches.caches

    def prefill(self, prompt: Sequence[int]) -> mx.array:
        tokens = mx.array(list(prompt))
        self._caches.prefilled(len(prompt))
        with mx.stream(self._stream):
            done = 0
            while len(prompt) - done > 1:
                step = min(PREFILL_STEP_SIZE, len(prompt) - done - 1)
                self.model(tokens[done : done + step][None], cache=self._cache)
                mx.eval([c.state for c in self._cache])
                done += step
                mx.clear_cache()
            # The last token alone, as generate_step's first `_step`: one row of logits.
            logits = self.model(tokens[done:][None], cache=self._cache)
            return logits[:, -1, :]

    def forward(self, tokens: Sequence[int] | mx.array) -> mx.array:
        ids = tokens if isinstance(tokens, mx.array) else mx.array(list(tokens))
        return self._forward_ids(ids)

    def _forward_ids(self, ids: mx.array) -> mx.array:
        self._caches.before_forward(ids)
        with mx.stream(self._stream):
            return self.model(ids.reshape(1, -1), cache=self._cache)[0]

    def argmax(self, logits: mx.array) -> mx.array:
        # mx.argmax returns the first maximal index: ties go to the lowest id.
        with mx.stream(self._stream):
            return mx.argmax(logits, axis=-1)

    def submit(self, tokens: mx.array) -> None:
        mx.async_eval(tokens)

    def read_tokens(self, tokens: mx.array) -> list[int]:
        # A 1-D token array lists as ints; MLX's stub types tolist() as any nesting.
        return [int(t) for t in cast("list[int]", tokens.tolist())]

    def read_row(self, logits: mx.array, row: int) -> np.ndarray:
        return np.array(logits[row].astype(mx.float32), dtype=np.float64)

    def rollback(self, n: int) -> int:
        # Window slices and the re-feed are lazy ops on our stream, queued behind the forward
        # they undo; the next forward waits for them, nothing here waits for the device.
        with mx.stream(self._stream):
            kept = self._caches.roll_back(n)
            if kept:
                tokens = self._caches.tokens
                assert tokens is not None  # set by the forward being rolled back
                self._forward_ids(tokens[:kept])
                self._caches.check()
        return kept

    def cache_len(self) -> int:
        return self._caches.position

    def clear_allocator_cache(self) -> None:
        mx.clear_cache()

    def peak_memory(self) -> tuple[float, str]:
        return mx.get_peak_memory() / 1e9, "mlx peak"

    @property
    def stream(self) -> mx.ThreadLocalStream:
        """The runner's stream (its device's): where a peer on this model runs too."""
        return self._stream


def wire_recommended() -> None:
    """Let MLX keep up to the device's recommended working set wired (resident), as mlx-lm
    does around each generation (`wired_limit`): on Metal our arms then run as its peer arm
    does, weights never paged out; a device that recommends no size (the CPU) is left as is."""
    size = mx.device_info().get("max_recommended_working_set_size")
    if isinstance(size, int) and size > 0:
        mx.set_wired_limit(size)


def _vocab_size(model) -> int:
    args = getattr(model, "args", None)
    size = getattr(args, "vocab_size", None)
    if size is None:
        text = getattr(args, "text_config", None)  # a dict on some (qwen3_5), a dataclass on others
        size = text.get("vocab_size") if isinstance(text, dict) else getattr(text, "vocab_size", None)
    return int(size) if size is not None else int(model.model.embed_tokens.weight.shape[0])


def _to_float32(model) -> None:
    """MLX's CPU backend: compute in float32 (bf16/fp16 checkpoints are slow and coarse there).

    Quantized weights stay packed integers; only their float scales and biases are cast,
    which is exact.
    """
    from mlx.utils import tree_flatten

    dtypes = {v.dtype for _, v in tree_flatten(model.parameters())}
    if dtypes & {mx.float16, mx.bfloat16}:
        model.set_dtype(mx.float32)
