"""Where and how the network runs: device, mixed precision, memory format. Decided once.

A stage resolves one ``Runtime`` from params (``runtime.device`` / ``runtime.amp`` /
``runtime.channels_last``) and passes it down; no module below resolves the device again, so
train, tune, evaluate and predict cannot disagree about it. Mixed precision is one
``torch.autocast`` plus a ``GradScaler(enabled=runtime.scaler)``, never ``if amp:`` branches.

- ``device: auto`` = CUDA when available, else CPU; ``cuda`` without CUDA is a ``ConfigError``.
- ``amp: auto`` = fp16 autocast (+ GradScaler when training) on CUDA, off on CPU: CPU autocast
  is slower than float32 for these convolutions and would break bit-reproducible CPU runs.
  bf16 has float32's exponent range and never needs a scaler.
- ``channels_last`` applies on CUDA only (cuDNN's fast NHWC kernels); on CPU it only costs
  copies for a one-channel input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from leakpipe.errors import ConfigError

AMP_MODES = ("auto", "off", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
OFF_DTYPE = torch.bfloat16  # any autocast-supported dtype; unused while autocast is disabled


@dataclass(frozen=True)
class Runtime:
    """The device, autocast / loss-scaling settings and memory format of one run."""

    device: torch.device
    amp_dtype: torch.dtype
    amp: bool                  # autocast enabled
    scaler: bool               # fp16 training needs a GradScaler
    channels_last: bool

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp)

    def to_device(self, x: Tensor) -> Tensor:
        """float32 on the device (stored data may be float16), in this run's memory format."""
        x = x.to(self.device, non_blocking=True).float()            # (B, 1, n_mels, T)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def place(self, model: nn.Module) -> nn.Module:
        """``model`` on the device, in this run's memory format."""
        model = model.to(self.device)
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def on(self, device: torch.device) -> Runtime:
        """The same settings on another device of the same type (a DDP rank's own GPU)."""
        return Runtime(device, self.amp_dtype, self.amp, self.scaler, self.channels_last)

    def describe(self) -> str:
        amp = {torch.float16: "fp16", torch.bfloat16: "bf16"}[self.amp_dtype] if self.amp \
            else "off"
        return (f"{self.device} amp={amp}{' +GradScaler' if self.scaler else ''}"
                f"{' channels_last' if self.channels_last else ''}")


def resolve_device(name: str, key: str = "runtime.device") -> torch.device:
    """'auto' -> cuda when available, else cpu; 'cuda' without CUDA is a ``ConfigError``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.split(":")[0] == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: {name!r} asked for, but no CUDA device is available")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{key}: {name!r} is not a device (auto | cpu | cuda)") from None


def make_runtime(device: str | torch.device = "auto", amp: str = "auto",
                 channels_last: bool = True, *, device_key: str = "runtime.device") -> Runtime:
    """The one place a device name and an amp mode become a ``Runtime``.

    ``device_key`` names the setting in errors (a params key or a command-line option).
    """
    dev = device if isinstance(device, torch.device) else resolve_device(device, device_key)
    if amp not in AMP_MODES:
        raise ConfigError(f"runtime.amp: {amp!r} is not one of {list(AMP_MODES)}")
    mode = ("fp16" if dev.type == "cuda" else "off") if amp == "auto" else amp
    cuda = dev.type == "cuda"
    if mode == "off":
        return Runtime(dev, OFF_DTYPE, amp=False, scaler=False,
                       channels_last=channels_last and cuda)
    return Runtime(dev, AMP_DTYPES[mode], amp=True, scaler=mode == "fp16",
                   channels_last=channels_last and cuda)


def cpu_runtime() -> Runtime:
    """Plain float32 on the CPU (tests, tools)."""
    return make_runtime("cpu", "off")
