"""Per-step throughput metrics and per-run accounting.

Per step (logged with the loss, LR and gradient norm):
    train/tokens_per_second   non-padding tokens of the step / its wall time, summed over processes
    train/mfu                 model FLOPs utilisation: 6 x parameters x tokens/s / (peak FLOP/s x devices).
                              6N per token is the usual training convention (forward 2N, backward 4N; PaLM,
                              appendix B); it ignores attention's quadratic term and counts frozen weights too,
                              so LoRA runs read a little high. Reported only when hardware.peak_flops_per_device
                              is set: there is no honest default peak for a CPU or an unknown GPU.
    train/peak_memory_mb      CUDA: peak allocated tensor memory; CPU: the process's peak resident set size
Per run (TrainResult.totals): tokens, device-hours (elapsed training time x devices), cost at
hardware.price_per_device_hour_usd.
"""
from __future__ import annotations

import resource
import sys

import torch

MFU_NEEDS_PEAK = "hardware.peak_flops_per_device is not set (no reliable peak is known for this device)"


def parameter_count(model) -> int:
    """The weights each token's forward pass multiplies with. bitsandbytes packs two 4-bit weights into each
    byte of a Params4bit, whose numel() is the packed count: QLoRA does the FLOPs of the unpacked matrix."""
    return sum(numel(p) * (2 if type(p).__name__ == "Params4bit" else 1) for p in model.parameters())


def numel(parameter) -> int:
    """A parameter's element count, also when ZeRO-3 has partitioned it (its local data is then empty)."""
    return getattr(parameter, "ds_numel", None) or parameter.numel()


class StepMeter:
    def __init__(self, model, hardware, world_size: int = 1):
        self.flops_per_token = 6 * parameter_count(model)
        self.peak_flops = hardware.peak_flops_per_device
        self.price_per_device_hour = hardware.price_per_device_hour_usd
        self.world_size = world_size
        self.mfu_omitted_reason = None if self.peak_flops else MFU_NEEDS_PEAK

    def step_metrics(self, tokens: int, seconds: float) -> dict[str, float]:
        """tokens: the step's tokens over every process; seconds: the step's wall time."""
        tokens_per_second = tokens / max(seconds, 1e-9)
        metrics = {"train/tokens_per_second": tokens_per_second, "train/peak_memory_mb": peak_memory_mb()}
        if self.peak_flops:
            metrics["train/mfu"] = self.flops_per_token * tokens_per_second / (self.peak_flops * self.world_size)
        return metrics

    def totals(self, tokens: int, elapsed_seconds: float) -> dict:
        """RunTotals. elapsed_seconds: training wall time summed over every restart of the run."""
        device_hours = elapsed_seconds * self.world_size / 3600
        cost = device_hours * self.price_per_device_hour if self.price_per_device_hour is not None else None
        return {"tokens": tokens, "device_hours": device_hours, "cost_usd": cost,
                "mfu_omitted_reason": self.mfu_omitted_reason}


def peak_memory_mb() -> float:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
