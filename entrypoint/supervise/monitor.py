"""GPU monitor: samples every GPU a run uses through NVML into `<run>/gpu.jsonl`.

One JSON line per GPU per interval: time (s since the run started), gpu, memory used on the device
(GiB), memory used by this run's own processes (GiB, `run_gib`: NVML's per-process figures for the
supervised process trees; several runs sharing a GPU stay apart), utilisation (%), power (W),
temperature (C) and the trainer's global step (from ms-swift's logging.jsonl), so memory can be plotted
against steps. A background thread of the entrypoint (not of the trainer) does the
sampling; NVML reads create no CUDA context and take microseconds, so the training processes are not
touched. (Its cost on step time has not been measured separately.)
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

GIB = 1024**3


def latest_step(logging_jsonl: Path) -> int:
    """The last `global_step/max_steps` ms-swift logged ("3/8" -> 3), 0 before the first."""
    try:
        with logging_jsonl.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            value = json.loads(line).get("global_step/max_steps")
        except ValueError:
            continue
        if value:
            return int(str(value).split("/")[0])
    return 0


# The kernel counts the processes its OOM killer ended: machine-wide in /proc/vmstat `oom_kill` (Linux >=
# 4.13; not namespaced, so a container reads the host's), and per cgroup in cgroup v2's memory.events
# `oom_kill` (Documentation/admin-guide/cgroup-v2.rst) or v1's memory.oom_control. The machine's count comes
# first: a global OOM kill (the machine out of RAM, no container limit reached) leaves the cgroup's count
# unchanged; seen on 2026-12-03, a trainer at 22.3 GB RSS killed by the global OOM killer was reported "not
# the kernel's out-of-memory killer".
OOM_FILES = (
    Path("/proc/vmstat"),
    Path("/sys/fs/cgroup/memory.events"),
    Path("/sys/fs/cgroup/memory/memory.oom_control"),
)


def oom_kills(files: tuple[Path, ...] = OOM_FILES) -> int | None:
    """How many processes the kernel's OOM killer has ended (on this machine, else in this container's
    cgroup: OOM_FILES), None where the host lets us read neither (deaths.likely_cause compares the count
    before and after a run)."""
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def run_memory(processes, pids: set[int]) -> int | None:
    """Bytes NVML attributes to `pids` among a device's compute processes; None when it lists none of
    them (the run has no context there yet, or NVML cannot see the processes, e.g. in a PID namespace)."""
    used = [p.usedGpuMemory for p in processes if p.pid in pids and isinstance(p.usedGpuMemory, int)]
    return sum(used) if used else None


class GpuMonitor:
    """Start with `start()`, stop with `stop()`. `peaks` holds each GPU's highest device-level use and
    `run_peaks` the highest use by this run's processes (GiB)."""

    def __init__(
        self,
        gpus: list[int],
        out: Path,
        interval: float,
        logging_jsonl: Path,
        pids: Callable[[], set[int]] = set,
    ):
        self.gpus, self.out, self.interval, self.logging_jsonl = gpus, out, interval, logging_jsonl
        self.pids = pids
        self.peaks: dict[int, float] = {}
        self.run_peaks: dict[int, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-monitor", daemon=True)
        self.error: str | None = None

    def start(self) -> GpuMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # no NVML: nothing to sample
            self.error = str(exc)
            return
        try:
            handles = {g: pynvml.nvmlDeviceGetHandleByIndex(g) for g in self.gpus}
            start = time.monotonic()
            with self.out.open("a", encoding="utf-8") as f:
                while not self._stop.is_set():
                    step = latest_step(self.logging_jsonl)
                    now = round(time.monotonic() - start, 2)
                    try:
                        pids = self.pids()
                    except Exception:  # a process ending mid-walk: attribute nothing this round
                        pids = set()
                    for gpu, h in handles.items():
                        row = {
                            "t": now,
                            "gpu": gpu,
                            "step": step,
                            "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(h).used / GIB, 3),
                        }
                        try:
                            mine = run_memory(pynvml.nvmlDeviceGetComputeRunningProcesses(h), pids)
                        except pynvml.NVMLError:
                            mine = None
                        if mine is not None:
                            row["run_gib"] = round(mine / GIB, 3)
                            self.run_peaks[gpu] = max(self.run_peaks.get(gpu, 0.0), row["run_gib"])
                        for key, read in (
                            ("util_pct", lambda h=h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                            ("power_w", lambda h=h: round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1)),
                            (
                                "temp_c",
                                lambda h=h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                            ),
                        ):
                            try:
                                row[key] = read()
                            except pynvml.NVMLError:
                                row[key] = None
                        self.peaks[gpu] = max(self.peaks.get(gpu, 0.0), row["memory_gib"])
                        f.write(json.dumps(row) + "\n")
                    f.flush()
                    self.samples += 1
                    self._stop.wait(self.interval)
        except Exception as exc:  # a monitor never takes a run down
            self.error = str(exc)
        finally:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()
