"""What the machine has: GPUs through NVML, peer-to-peer links, InfiniBand/RoCE ports, /dev/shm.

`probe()` reads the real machine (nvidia-ml-py); `load(path)` reads an inventory JSON file instead, so a
user can plan for a machine they are not on (`python -m entrypoint doctor --save-inventory FILE` writes
one). Every decision downstream takes an `Inventory`, never NVML itself, so tests feed made-up machines.

Ordinals are NVML indices as seen inside the container (Docker renumbers exposed GPUs from 0). Child
processes get CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers GPUs the same way NVML does.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from pydantic import BaseModel, Field

GIB = 1024**3
INFINIBAND_SYSFS = Path("/sys/class/infiniband")
SHM_PATH = Path("/dev/shm")

# nvmlGpuP2PStatus_t (nvidia-ml-py pynvml.py: NVML_P2P_STATUS_*).
P2P_STATUS = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
# nvmlGpuP2PCapsIndex_t. pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a trailing comma in
# nvidia-ml-py's source), so the literal values are used here.
P2P_CAPS_READ = 0
P2P_CAPS_NVLINK = 2


class GPU(BaseModel):
    index: int = Field(description="NVML ordinal inside the container")
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_gib: float
    memory_free_gib: float
    compute_capability: tuple[int, int]

    def describe(self) -> str:
        return f"GPU {self.index}: {self.name}, {self.uuid}, PCI {self.pci_bus_id}, {self.memory_total_gib:.1f} GiB"


class P2PLink(BaseModel):
    """NVML peer-to-peer status between two GPUs (`nvmlDeviceGetP2PStatus`)."""

    a: int
    b: int
    read: str = Field(description="P2P read capability: ok | not_supported | chipset_not_supported | ...")
    nvlink: str = Field("unknown", description="NVLink capability, same vocabulary")


class IBPort(BaseModel):
    """One port of an RDMA device under /sys/class/infiniband (InfiniBand, or RoCE on Ethernet)."""

    device: str
    port: int
    state: str  # e.g. "4: ACTIVE"
    link_layer: str  # "InfiniBand" | "Ethernet" (RoCE)

    @property
    def active(self) -> bool:
        return "ACTIVE" in self.state.upper()


class Inventory(BaseModel):
    source: str = Field(description="'nvml' or the inventory file it was read from")
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(None, description="highest CUDA version the driver supports")
    gpus: list[GPU] = []
    p2p: list[P2PLink] = []
    infiniband: list[IBPort] = []
    shm_bytes: int | None = Field(None, description="size of /dev/shm in bytes")
    interfaces: list[str] | None = Field(None, description="network interface names (None: not recorded)")
    nvml_error: str | None = Field(None, description="why NVML could not be read, if it could not")

    def gpu(self, index: int) -> GPU | None:
        return next((g for g in self.gpus if g.index == index), None)

    def p2p_status(self, a: int, b: int) -> str:
        """P2P read status between two ordinals; 'unknown' when the inventory does not say."""
        for link in self.p2p:
            if {link.a, link.b} == {a, b}:
                return link.read
        return "unknown"

    def active_ib_ports(self) -> list[IBPort]:
        return [p for p in self.infiniband if p.active]

    @property
    def shm_gib(self) -> float | None:
        return None if self.shm_bytes is None else self.shm_bytes / GIB

    def table(self) -> str:
        """The ordinal -> UUID / name / PCI mapping, one line per GPU."""
        if not self.gpus:
            return f"no GPU visible ({self.nvml_error or 'NVML reports none'})"
        return "\n".join(g.describe() for g in self.gpus)


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
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is in the lock
        return Inventory(
            source="nvml", nvml_error=f"nvidia-ml-py missing: {exc}", infiniband=ib, shm_bytes=shm
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Inventory(
            source="nvml", nvml_error=str(exc), infiniband=ib, shm_bytes=shm, interfaces=interfaces
        )
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
            infiniband=ib,
            shm_bytes=shm,
            interfaces=interfaces,
        )
    except pynvml.NVMLError as exc:
        return Inventory(
            source="nvml", nvml_error=str(exc), infiniband=ib, shm_bytes=shm, interfaces=interfaces
        )
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def load(path: str | Path) -> Inventory:
    """Read an inventory JSON file (the format `save` writes). Raises OSError or pydantic.ValidationError."""
    inventory = Inventory.model_validate_json(Path(path).read_text())
    return inventory.model_copy(update={"source": f"file:{path}"})


def save(inventory: Inventory, path: str | Path) -> None:
    Path(path).write_text(inventory.model_dump_json(indent=2) + "\n")
