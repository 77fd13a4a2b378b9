"""Make a large GPU act as a physical smaller card: hold all of its free memory but LEAVE GiB, until stopped.

    python bench/device/ballast.py --leave 24 [--device 0] [--ready FILE]

Unlike EMULATE_VRAM_GB (a per-process allocator cap, entrypoint/child/hooks/emulate_vram.py), the card
this leaves is the same for every process and every allocator, vLLM's sleep-mode pool included: what
sleep, offload and wake-up measure here is what a real 24 GiB card would show. The emulation stays on
for the run (vLLM sizes its share from the card's total), and its cap steps aside by itself because the
card's free memory is already no more than the emulated size (emulate_vram.cap_fraction).

Prints "ballast: holding H GiB; free now F GiB of T GiB", writes FILE once it holds, then sleeps until
SIGTERM or SIGINT. One run at a time beside it (every run shares the LEAVE GiB).
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

import torch

GIB = 1024**3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--leave", type=float, default=24.0, help="GiB left free for the run (default 24)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--ready", type=Path, help="a file written once the memory is held")
    args = p.parse_args()
    torch.cuda.set_device(args.device)
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    # this process's own context is already counted in `free`; hold the rest in 1 GiB blocks so the last one
    # can be sized exactly
    hold = int(free - args.leave * GIB)
    if hold <= 0:
        raise SystemExit(
            f"ballast: only {free / GIB:.2f} GiB free, nothing to hold to leave {args.leave} GiB"
        )
    blocks = [torch.empty(GIB, dtype=torch.uint8, device="cuda") for _ in range(hold // GIB)]
    if hold % GIB:
        blocks.append(torch.empty(hold % GIB, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print(
        f"ballast: holding {hold / GIB:.2f} GiB; free now {free / GIB:.2f} GiB of {total / GIB:.2f} GiB",
        flush=True,
    )
    if args.ready:
        args.ready.write_text(f"{free / GIB:.2f}\n")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop:
        time.sleep(1)
    del blocks


if __name__ == "__main__":
    main()
