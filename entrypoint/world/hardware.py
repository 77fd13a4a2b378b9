"""What the machine has: GPUs through NVML, peer-to-peer links, InfiniBand/RoCE ports, /dev/shm, RAM.

`probe()` reads the real machine (nvidia-ml-py); `load(path)` reads an inventory JSON file instead, so a
user can plan for a machine they are not on (`python -m entrypoint doctor --save-inventory FILE` writes
one). Every decision downstream takes an `Inventory` (inventory.py, data only), never NVML itself, so tests
feed made-up machines.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from entrypoint.facts.inventory import (
    GIB,
    GPU,
    P2P_CAPS_NVLINK,
    P2P_CAPS_READ,
    P2P_STATUS,
    IBPort,
    Inventory,
    P2PLink,
)

INFINIBAND_SYSFS = Path("/sys/class/infiniband")
SHM_PATH = Path("/dev/shm")


def read_infiniband(root: Path = INFINIBAND_SYSFS) -> list[IBPort]:
    """RDMA ports from sysfs; an absent or empty directory means no IB/RoCE device."""
    ports: list[IBPort] = []
    if not root.is_dir():
        return ports
    for device in sorted(root.iterdir()):
        for port_dir in sorted((device / "ports").glob("*")):
            try:
                state = (port_dir / "state").read_text().strip()
                layer = (port_dir / "link_layer").read_text().strip()
                ports.append(
                    IBPort(device=device.name, port=int(port_dir.name), state=state, link_layer=layer)
                )
            except (OSError, ValueError):
                continue
    return ports


def read_shm_bytes(path: Path = SHM_PATH) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def read_ram() -> dict[str, int | None]:
    """{"ram_total_bytes", "ram_available_bytes"} from psutil.virtual_memory() (Linux: /proc/meminfo's
    MemTotal and MemAvailable); None each where it cannot be read."""
    try:
        import psutil

        memory = psutil.virtual_memory()
        return {"ram_total_bytes": int(memory.total), "ram_available_bytes": int(memory.available)}
    except (ImportError, OSError, RuntimeError):  # pragma: no cover - psutil is in the lock
        return {"ram_total_bytes": None, "ram_available_bytes": None}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def read_interfaces() -> list[str] | None:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return None


def probe() -> Inventory:
    """Read this machine through NVML. Never raises: NVML failures land in `nvml_error`."""
    ib, shm = read_infiniband(), read_shm_bytes()
    interfaces = read_interfaces()
    host = {"infiniband": ib, "shm_bytes": shm, **read_ram()}
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is in the lock
        return Inventory(source="nvml", nvml_error=f"nvidia-ml-py missing: {exc}", **host)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Inventory(source="nvml", nvml_error=str(exc), interfaces=interfaces, **host)
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(
                GPU(
                    index=i,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                    name=_text(pynvml.nvmlDeviceGetName(h)),
                    pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(h).busId),
                    memory_total_gib=round(mem.total / GIB, 3),
                    memory_free_gib=round(mem.free / GIB, 3),
                    compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                )
            )
        links = []
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                status = {}
                for label, index in (("read", P2P_CAPS_READ), ("nvlink", P2P_CAPS_NVLINK)):
                    try:
                        status[label] = P2P_STATUS.get(
                            pynvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], index), "unknown"
                        )
                    except pynvml.NVMLError:
                        status[label] = "unknown"
                links.append(P2PLink(a=i, b=j, **status))
        return Inventory(
            source="nvml",
            driver_version=driver,
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=gpus,
            p2p=links,
            interfaces=interfaces,
            **host,
        )
    except pynvml.NVMLError as exc:
        return Inventory(source="nvml", nvml_error=str(exc), interfaces=interfaces, **host)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def load(path: str | Path) -> Inventory:
    """Read an inventory JSON file (the format `save` writes). Raises OSError or pydantic.ValidationError."""
    inventory = Inventory.model_validate_json(Path(path).read_text())
    return inventory.model_copy(update={"source": f"file:{path}"})


def save(inventory: Inventory, path: str | Path) -> None:
    Path(path).write_text(inventory.model_dump_json(indent=2) + "\n")


def gpu_visible(environ: Mapping[str, str]) -> bool:
    """NVML lists a GPU and CUDA_VISIBLE_DEVICES does not hide them all ("" or -1): what a process started
    with this environment could use. Asks NVML, never CUDA (a CUDA context here would break vLLM's forked
    engine: "Cannot re-initialize CUDA in forked subprocess")."""
    return bool(probe().gpus) and environ.get("CUDA_VISIBLE_DEVICES") not in ("", "-1")
