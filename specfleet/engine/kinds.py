"""The closed sets of engines and devices: one `Literal` each, every tuple derived from it.

Adding an engine or a device starts here; `typing.get_args` gives the tuples that CLI checks,
matrix files, the store and the hardware probe read.
"""

from __future__ import annotations

from typing import Literal, get_args

ModelEngine = Literal["mlx", "torch"]  # engines that load real weights
Engine = Literal[ModelEngine, "toy"]
Device = Literal["metal", "cuda", "mps", "cpu"]
DeviceChoice = Literal["auto", Device]  # "auto": the runner picks the best device present

MODEL_ENGINES: tuple[ModelEngine, ...] = get_args(ModelEngine)
ENGINES: tuple[Engine, ...] = get_args(Engine)
DEVICES: tuple[Device, ...] = get_args(Device)
DEVICE_CHOICES: tuple[DeviceChoice, ...] = get_args(DeviceChoice)
# The devices each engine's runner can use (besides "auto"): a new device is added here and
# in `Device`, then resolved by the runner that can use it. The toy runners compute on the CPU.
ENGINE_DEVICES: dict[Engine, tuple[Device, ...]] = {
    "torch": ("cpu", "cuda", "mps"),
    "mlx": ("cpu", "metal", "cuda"),
    "toy": ("cpu",),
}


def choices_text(values: tuple[str, ...]) -> str:
    """`a, b or c`: a closed set as help text reads it."""
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def steps_overlap_host(engine: str, device: str) -> bool:
    """Whether a submitted decode step computes while the host goes on: yes on CUDA and on
    MLX (its own stream thread, on the CPU too); no for torch on the CPU, whose forward
    returns only when computed, nor on MPS, where the token read (`.tolist()`) commits and
    waits for the whole stream, the step submitted before it included. Where steps do not
    overlap, pipelining hides nothing and only delays every match that appears while a step
    is in flight by a token, so the round loop does not pipeline there (docs/engine.md, "The
    round loop")."""
    return not (engine == "torch" and device in ("cpu", "mps"))
