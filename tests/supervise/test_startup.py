"""The start-up table (entrypoint/supervise/startup.py): from the trainer's events and vLLM's own log
lines."""

from __future__ import annotations

import gzip

from entrypoint.supervise import startup
from tests.conftest import ROOT

# the trainer's log of countdown-1x4090 on an H200 (bench/throughput/2026-12-01-1622-countdown-first)
TRAINER_LOG = ROOT / "tests" / "fixtures" / "countdown-1x4090-2026-12-01-trainer.log.gz"


def test_marks_count_from_the_command_and_keep_the_last_attempt():
    events = [
        {"t": 10.0, "phase": "start", "process": "entrypoint"},  # a first attempt, stopped
        {"t": 15.0, "phase": "start", "process": "swift"},
        {"t": 100.0, "phase": "start", "process": "entrypoint"},  # resumed: this is the start that counts
        {"t": 104.5, "phase": "start", "process": "swift"},
        {"t": 106.0, "phase": "start", "process": "launcher"},
        {"t": 109.0, "phase": "start", "process": "worker"},
        {"t": 115.0, "phase": "import", "module": "torch", "seconds": 5.0},
        {"t": 121.0, "phase": "startup", "mark": "model loaded", "seconds": 2.0},
        {"t": 130.0, "phase": "startup", "mark": "vLLM engine starting"},
        {"t": 155.0, "phase": "startup", "mark": "vLLM engine ready", "seconds": 25.0},
        {"t": 160.0, "phase": "train", "seconds": 3.0, "step": 0},
        {"t": 161.0, "phase": "startup", "mark": "first step logged", "seconds": 0.0},
    ]
    at = startup.marks(events)
    assert at == {
        "trainer started": 4.5,
        "worker started": 9.0,
        "import torch": 15.0,
        "model loaded": 21.0,
        "vLLM engine starting": 30.0,
        "vLLM engine ready": 55.0,
        "first step logged": 61.0,
    }
    rows = startup.table(at, {"CUDA graphs": 4.0})
    assert "| vLLM engine ready | 55.0 | 25.0 | vLLM: weights, torch.compile" in "\n".join(rows)
    assert rows[-1] == "vLLM engine (s, its own log): CUDA graphs 4.0"
    assert startup.marks(events, command_start=0.0)["first step logged"] == 161.0
    assert startup.marks([{"t": 1.0, "phase": "train"}]) == {}  # no start known: no table


def test_a_worker_started_without_ms_swift_s_cli_is_the_trainer_s_start_too():
    """One process on one node starts the worker file directly (plan._worker_directly): no `swift` or
    launcher event, and a subprocess started later (vLLM's, torch's compile workers) moves no mark."""
    events = [
        {"t": 100.0, "phase": "start", "process": "entrypoint"},
        {"t": 101.2, "phase": "start", "process": "worker"},
        {"t": 110.0, "phase": "startup", "mark": "arguments parsed", "seconds": 0.6},
        {"t": 125.0, "phase": "start", "process": "worker"},
    ]
    assert startup.marks(events) == {"trainer started": 1.2, "worker started": 1.2, "arguments parsed": 10.0}


def test_vllm_parts_from_the_engine_log_of_the_lent_h200():
    """The shipped recipe's first GPU run: 39 of the engine's 61 s were CUDA graph capture (67 sizes)."""
    text = gzip.decompress(TRAINER_LOG.read_bytes()).decode("utf-8", "replace")
    assert startup.vllm_parts(text) == {
        "weights": 0.22,
        "torch.compile": 10.54,
        "CUDA graphs": 39.0,
        "whole engine": 60.73,
    }


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"t": 1, "phase": "start", "process": "entrypoint"}\n{"t": 2, "pha')
    assert startup.read_events(path) == [{"t": 1, "phase": "start", "process": "entrypoint"}]
