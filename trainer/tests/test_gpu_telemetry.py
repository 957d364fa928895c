"""GPU telemetry parsing and sampling. This machine has no GPU, so nvidia-smi's answers are recorded ones: the
lines below are what `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,temperature.gpu
--format=csv,noheader,nounits` printed on a two-GPU A100 node (driver 535)."""
from __future__ import annotations

import pytest

from hanzo_ml import gpu_telemetry
from hanzo_ml.gpu_telemetry import GpuSample, GpuSampler, TelemetryError, parse_query_output, sample_metrics

RECORDED = ("0, GPU-5b2c0a8e-3f4d-9e1b-7c6a-2d8f0e4b1a93, 87, 31245, 64\n"
            "1, GPU-a1f3c7d2-8e5b-4a60-9b1c-3e7d2f6a8c05, 0, 4, 31\n")


def test_parses_one_sample_per_gpu_from_recorded_output():
    assert parse_query_output(RECORDED) == [
        GpuSample(0, "GPU-5b2c0a8e-3f4d-9e1b-7c6a-2d8f0e4b1a93", 87.0, 31245.0, 64.0),
        GpuSample(1, "GPU-a1f3c7d2-8e5b-4a60-9b1c-3e7d2f6a8c05", 0.0, 4.0, 31.0),
    ]


def test_names_points_as_mlflow_system_metrics_per_node_and_gpu():
    metrics = sample_metrics(parse_query_output(RECORDED), "node-a")
    assert metrics == {
        "system/node-a/gpu_0_utilization_percentage": 87.0,
        "system/node-a/gpu_0_memory_usage_megabytes": 31245.0,
        "system/node-a/gpu_0_temperature_celsius": 64.0,
        "system/node-a/gpu_1_utilization_percentage": 0.0,
        "system/node-a/gpu_1_memory_usage_megabytes": 4.0,
        "system/node-a/gpu_1_temperature_celsius": 31.0,
    }


def test_a_field_the_gpu_does_not_report_is_an_error_naming_line_and_field():
    with pytest.raises(TelemetryError, match=r"line 2: field temperature.gpu: expected a number, got '\[N/A\]'"):
        parse_query_output(RECORDED.splitlines()[0] + "\n1, GPU-x, 3, 5, [N/A]\n")
    with pytest.raises(TelemetryError, match="line 1: expected 5 fields"):
        parse_query_output("0, GPU-x, 3\n")


def test_no_nvidia_smi_means_no_sampler_and_nothing_logged(monkeypatch):
    logged = []
    monkeypatch.setattr(gpu_telemetry.shutil, "which", lambda name: None)
    assert gpu_telemetry.start_gpu_sampler(type("T", (), {"log_metrics": lambda self, m, step: logged.append(m)})(), lambda: 0) is None
    assert logged == []


def test_an_nvidia_smi_listing_no_gpu_means_no_sampler(monkeypatch):
    monkeypatch.setattr(gpu_telemetry.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpu_telemetry, "query_gpus", lambda binary: [])
    assert gpu_telemetry.start_gpu_sampler(object(), lambda: 0) is None


def test_a_sample_is_logged_at_the_current_training_step(monkeypatch):
    logged = []

    class Tracker:
        def log_metrics(self, metrics, step):
            logged.append((step, metrics))

    monkeypatch.setattr(gpu_telemetry, "query_gpus", lambda binary: parse_query_output(RECORDED))
    GpuSampler(Tracker(), lambda: 42, binary="nvidia-smi", node="n1").sample_once()
    assert logged[0][0] == 42
    assert logged[0][1]["system/n1/gpu_0_utilization_percentage"] == 87.0
