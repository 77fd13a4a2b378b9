"""What a machine has, as data: GPUs, peer-to-peer links, InfiniBand/RoCE ports, /dev/shm, RAM.

The types every decision takes (plan/layout.py, plan/nccl.py, plan/build.py); world/hardware.py fills them
from NVML and sysfs, or from an inventory JSON file (`doctor --save-inventory FILE`). This module reads
nothing.

Ordinals are NVML indices as seen inside the container (Docker renumbers exposed GPUs from 0). Child
processes get CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers GPUs the same way NVML does.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

GIB = 1024**3

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
# What an inventory file may say of a link (P2P_STATUS's words): a hand-written file with another word
# validated silently and every link counted as without P2P.
P2PStatus = Literal[
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "ioh_topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
]
# NVML's nvmlSystemGetDriverVersion ("535.129.03"), read by packaging.Version in preflight and plan/nccl: a
# hand-written "garbage" validated silently and turned off every driver check.
DRIVER_VERSION_RE = re.compile(r"\d+(\.\d+)*")
CUDA_VERSION_RE = re.compile(r"\d+\.\d+")  # the highest CUDA the driver supports, "12.2" (hardware.probe)


class GPU(BaseModel):
    index: int = Field(ge=0, description="NVML ordinal inside the container")
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_gib: float = Field(gt=0)
    memory_free_gib: float = Field(ge=0)
    compute_capability: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=0)]]

    @model_validator(mode="after")
    def _free_within_total(self) -> GPU:
        if self.memory_free_gib > self.memory_total_gib:
            raise ValueError(
                f"memory_free_gib {self.memory_free_gib} is above memory_total_gib {self.memory_total_gib} "
                "(expected free <= total, GiB)"
            )
        return self

    def describe(self) -> str:
        return (
            f"GPU {self.index}: {self.name}, {self.uuid}, PCI {self.pci_bus_id}, {self.memory_total_gib:.1f} "
            "GiB"
        )


class P2PLink(BaseModel):
    """NVML peer-to-peer status between two GPUs (`nvmlDeviceGetP2PStatus`)."""

    a: int = Field(ge=0)
    b: int = Field(ge=0)
    read: P2PStatus = Field(
        description="P2P read capability: ok | not_supported | chipset_not_supported | ..."
    )
    nvlink: P2PStatus = Field("unknown", description="NVLink capability, same vocabulary")


class IBPort(BaseModel):
    """One port of an RDMA device under /sys/class/infiniband (InfiniBand, or RoCE on Ethernet)."""

    device: str
    port: int = Field(ge=0)
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
    shm_bytes: int | None = Field(None, ge=0, description="size of /dev/shm in bytes")
    ram_total_bytes: int | None = Field(
        None, ge=0, description="the machine's RAM in bytes (None: not recorded)"
    )
    ram_available_bytes: int | None = Field(
        None,
        ge=0,
        description="RAM available to new processes when the inventory was read (psutil's `available`)",
    )
    interfaces: list[str] | None = Field(None, description="network interface names (None: not recorded)")
    nvml_error: str | None = Field(None, description="why NVML could not be read, if it could not")

    @field_validator("driver_version")
    @classmethod
    def _driver_version(cls, value: str | None) -> str | None:
        if value is not None and not DRIVER_VERSION_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a driver version (expected digits and dots, like 535.129.03)")
        return value

    @field_validator("cuda_driver_version")
    @classmethod
    def _cuda_version(cls, value: str | None) -> str | None:
        if value is not None and not CUDA_VERSION_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a CUDA version (expected major.minor, like 12.2)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Inventory:
        """What the decisions take for granted: one GPU per ordinal, links between listed GPUs, RAM available
        within the total (each was a hand-written file's silent misreading)."""
        indices = [g.index for g in self.gpus]
        twice = sorted({i for i in indices if indices.count(i) > 1})
        if twice:
            raise ValueError(f"gpus: index {twice[0]} is listed twice (expected one entry per ordinal)")
        for link in self.p2p:
            if link.a == link.b or not {link.a, link.b} <= set(indices):
                raise ValueError(
                    f"p2p: the link {link.a}-{link.b} is not between two listed GPUs (expected a and b "
                    f"among the gpus' indices {', '.join(map(str, indices)) or 'none'}, different)"
                )
        total, free = self.ram_total_bytes, self.ram_available_bytes
        if total is not None and free is not None and free > total:
            raise ValueError(
                f"ram_available_bytes {free} is above ram_total_bytes {total} (expected available <= total)"
            )
        return self

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

    @property
    def ram_free_gib(self) -> float | None:
        """RAM a run can take (GiB): what was available when the inventory was read, else the total; None when
        the inventory does not say (an older inventory file)."""
        free = self.ram_available_bytes if self.ram_available_bytes is not None else self.ram_total_bytes
        return None if free is None else free / GIB

    def table(self) -> str:
        """The ordinal -> UUID / name / PCI mapping, one line per GPU."""
        if not self.gpus:
            return f"no GPU visible ({self.nvml_error or 'NVML reports none'})"
        return "\n".join(g.describe() for g in self.gpus)
