"""GPU telemetry of a training job, sampled with `nvidia-smi` and logged as MLflow system metrics.

Each sample becomes three metric points per GPU, named as MLflow's own system-metrics monitor names them
(`system/<node>/gpu_<i>_utilization_percentage`, `..._memory_usage_megabytes`, plus `..._temperature_celsius`),
so the MLflow UI's system-metrics view shows them, and the control plane turns each (node, GPU, step) into a
`hanzo.ml.gpu` event in the transaction that stores the points (db/repo/metrics.ts).

Nothing is sampled where no GPU exists: without `nvidia-smi`, or when it lists no GPU, `start_gpu_sampler`
returns None and the job logs no telemetry. nvidia-smi rather than pynvml: the driver ships it on every GPU
node, and the trainer's lock file does not carry pynvml.
"""
from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable, Protocol

log = logging.getLogger(__name__)

QUERY_FIELDS = ("index", "uuid", "utilization.gpu", "memory.used", "temperature.gpu")
NVIDIA_SMI_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]
UUID_ARGS = ["--query-gpu=uuid", "--format=csv,noheader"]
DEFAULT_INTERVAL_S = 10.0  # MLflow's system-metrics default; a sample costs one nvidia-smi call (~50 ms)


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str
    utilization_percent: float
    memory_used_mib: float
    temperature_c: float


class TelemetryError(ValueError):
    """nvidia-smi answered something this parser does not understand."""


def parse_query_output(text: str) -> list[GpuSample]:
    """Parses `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` output: one line per GPU.

    A field the GPU does not report ("[N/A]", "[Not Supported]") is an error naming the line and the field:
    a sample with a made-up value would be worse than none.
    """
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(QUERY_FIELDS):
            raise TelemetryError(f"nvidia-smi line {number}: expected {len(QUERY_FIELDS)} fields "
                                 f"({', '.join(QUERY_FIELDS)}), got {len(fields)}: {line!r}")
        values: list[float] = []
        for name, raw in zip(QUERY_FIELDS[2:], fields[2:]):
            try:
                values.append(float(raw))
            except ValueError:
                raise TelemetryError(f"nvidia-smi line {number}: field {name}: expected a number, got {raw!r}") from None
        try:
            index = int(fields[0])
        except ValueError:
            raise TelemetryError(f"nvidia-smi line {number}: field index: expected an integer, got {fields[0]!r}") from None
        samples.append(GpuSample(index, fields[1], *values))
    return samples


def sample_metrics(samples: list[GpuSample], node: str) -> dict[str, float]:
    """The MLflow system-metric points of one sample of every GPU of `node`."""
    out: dict[str, float] = {}
    for s in samples:
        prefix = f"system/{node}/gpu_{s.index}_"
        out[prefix + "utilization_percentage"] = s.utilization_percent
        out[prefix + "memory_usage_megabytes"] = s.memory_used_mib
        out[prefix + "temperature_celsius"] = s.temperature_c
    return out


def gpu_uuids(path: str | None = None) -> list[str] | None:
    """The UUIDs of the GPUs nvidia-smi lists (in a container: those its device plugin mounted); None without a
    working nvidia-smi on `path` (default: $PATH)."""
    binary = shutil.which("nvidia-smi", path=path)
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, *UUID_ARGS], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("nvidia-smi failed: %s", err)
        return None
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def query_gpus(binary: str) -> list[GpuSample]:
    done = subprocess.run([binary, *NVIDIA_SMI_ARGS], capture_output=True, text=True, timeout=30, check=True)
    return parse_query_output(done.stdout)


class Tracker(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


class GpuSampler:
    """Samples every `interval_s` on a daemon thread until `stop()`; each sample is logged at the current step."""

    def __init__(self, tracker: Tracker, step: Callable[[], int], *, binary: str, node: str,
                 interval_s: float = DEFAULT_INTERVAL_S):
        self.tracker, self.step, self.binary, self.node, self.interval_s = tracker, step, binary, node, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)

    def sample_once(self) -> None:
        self.tracker.log_metrics(sample_metrics(query_gpus(self.binary), self.node), self.step())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample_once()
            except (OSError, subprocess.SubprocessError, TelemetryError) as err:
                # Telemetry must never stop training: the sample is skipped and said so.
                log.warning("GPU telemetry sample skipped: %s", err)

    def start(self) -> "GpuSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def start_gpu_sampler(tracker: Tracker, step: Callable[[], int], *, interval_s: float = DEFAULT_INTERVAL_S,
                      node: str | None = None) -> GpuSampler | None:
    """Starts sampling when this machine has a GPU nvidia-smi can see; None (and nothing logged) otherwise."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        if not query_gpus(binary):
            return None
    except (OSError, subprocess.SubprocessError, TelemetryError) as err:
        log.warning("GPU telemetry off: nvidia-smi failed: %s", err)
        return None
    return GpuSampler(tracker, step, binary=binary, node=node or socket.gethostname(), interval_s=interval_s).start()
