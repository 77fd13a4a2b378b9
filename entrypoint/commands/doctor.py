"""`doctor`: what this machine offers a run: the GPUs NVML sees, the driver, P2P and InfiniBand/RoCE links,
/dev/shm, and the NCCL settings they lead to. `--save-inventory FILE` writes it for `plan` and `validate`
elsewhere (INVENTORY=FILE)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from entrypoint.errors import EXIT_OK
from entrypoint.facts.inventory import GIB, Inventory
from entrypoint.plan import layout, nccl
from entrypoint.world import hardware, host

NAME = "doctor"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`doctor [--save-inventory FILE] [--json]`."""
    parser = subparsers.add_parser(
        NAME,
        description="Show the GPU inventory, NCCL-relevant facts and /dev/shm of this machine.",
    )
    parser.add_argument("--save-inventory", metavar="FILE", help="write this machine's inventory as JSON")
    parser.add_argument("--json", action="store_true", help="print the inventory as JSON")
    return parser


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `doctor` command: probes NVML once, prints (and saves) what it found; 0."""
    inventory = hardware.probe()
    if args.save_inventory:
        hardware.save(inventory, args.save_inventory)
        print(f"inventory written to {args.save_inventory}")
    print(inventory.model_dump_json(indent=2) if args.json else doctor_text(inventory, environ))
    return EXIT_OK


def doctor_text(inv: Inventory, environ: Mapping[str, str]) -> str:
    """The inventory as `doctor` prints it: the GPU table, links, /dev/shm, and without a GPU the same help
    `train` gives (layout.no_gpu_text)."""
    lines = [f"driver {inv.driver_version or '-'} (CUDA {inv.cuda_driver_version or '-'})", inv.table()]
    for link in inv.p2p:
        lines.append(f"P2P {link.a}<->{link.b}: read {link.read}, nvlink {link.nvlink}")
    active = inv.active_ib_ports()
    lines.append(
        "InfiniBand/RoCE: "
        + (", ".join(f"{p.device}:{p.port} {p.link_layer}" for p in active) or "no active port")
    )
    lines.append(f"/dev/shm: {inv.shm_gib:.2f} GiB" if inv.shm_gib is not None else "/dev/shm: unknown")
    if inv.ram_total_bytes is not None:
        free = (
            f", {inv.ram_available_bytes / GIB:.1f} GiB available"
            if inv.ram_available_bytes is not None
            else ""
        )
        lines.append(f"RAM: {inv.ram_total_bytes / GIB:.1f} GiB{free}")
    else:
        lines.append("RAM: unknown")
    if nccl.accelerate_rtx40_check_fires(inv):
        lines.append("accelerate's RTX 40 check fires here: NCCL_P2P_DISABLE and NCCL_IB_DISABLE will be set")
    if not inv.gpus:
        lines.append(layout.no_gpu_text(inv, host.in_container(environ)))
    return "\n".join(lines)
