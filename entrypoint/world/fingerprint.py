"""What a run's inputs were, byte for byte: the dataset files' sha256 and the model folder's files, recorded
in the manifest (`inputs`) so that `rerun` can tell the same inputs from changed ones.

A model's weights can be tens of GiB: hashing them whole at every start would cost minutes. A file in the
Hugging Face cache is named by its sha256 already (huggingface_hub keeps LFS files as `blobs/<sha256>`), so
that name is taken as it is; other files up to WHOLE_LIMIT bytes are hashed whole; larger ones by their size
and the sha256 of their first and last SAMPLE bytes (a safetensors file begins with its tensor index, so a
changed layout or dtype shows there). Each identity says which of the three it is, and `rerun` compares like
with like.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from entrypoint.recipe import load as recipe_mod
from entrypoint.record.export import sha256_file
from entrypoint.world import hubcache

WHOLE_LIMIT = 512 * 1024**2  # bytes: hashed whole below this (about a second at the speed of one core)
SAMPLE = 16 * 1024**2  # bytes from each end of a larger file
HUB_BLOB = re.compile(r"[0-9a-f]{64}")
MODEL_FILES = ("*.json", "*.safetensors", "*.bin", "*.model", "*.txt", "*.tiktoken", "*.py", "*.gguf")


def file_identity(path: Path) -> str:
    """One file's identity: `sha256:<hex>` (hashed whole, or the name of the hub cache blob it links to) or
    `sampled:<bytes>:<hex>` (a file over WHOLE_LIMIT: its size and the sha256 of its two ends). Raises
    OSError."""
    target = path.resolve()
    if path.is_symlink() and target.parent.name == "blobs" and HUB_BLOB.fullmatch(target.name):
        return f"sha256:{target.name}"
    size = target.stat().st_size
    if size <= WHOLE_LIMIT:
        return f"sha256:{sha256_file(target)}"
    digest = hashlib.sha256()
    with target.open("rb") as f:
        digest.update(f.read(SAMPLE))
        f.seek(size - SAMPLE)
        digest.update(f.read(SAMPLE))
    return f"sampled:{size}:{digest.hexdigest()}"


def model_files(folder: Path) -> dict[str, str]:
    """{file name: file_identity} of a model folder's weights, config and tokenizer files (MODEL_FILES, top
    level, as ms-swift and transformers read them); {} when the folder does not exist. Raises OSError on a
    file that cannot be read."""
    if not folder.is_dir():
        return {}
    names = sorted({p.name for pattern in MODEL_FILES for p in folder.glob(pattern) if p.is_file()})
    return {name: file_identity(folder / name) for name in names}


def dataset_files(specs: list[str]) -> list[dict[str, object]]:
    """The identity of each dataset the trainer reads (plan.dataset_paths; ms-swift's `#N` row suffix kept
    apart): {"spec", "path", "sha256", "bytes"} for a local file; for anything else (a hub id, a missing
    path) {"spec", "sha256": None, "why"}. Never raises: an unreadable file is recorded as such."""
    return _files(specs, rows=True)


def code_files(paths: list[str]) -> list[dict[str, object]]:
    """dataset_files for files the trainer reads whole (reward plugins, a SYSTEM prompt file): no row
    suffix."""
    return _files(paths, rows=False)


def _files(specs: list[str], rows: bool) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for spec in specs:
        path = Path(spec.partition("#")[0] if rows else spec).expanduser()
        try:
            if path.is_file():
                out.append(
                    {
                        "spec": spec,
                        "path": str(path),
                        "sha256": sha256_file(path),
                        "bytes": path.stat().st_size,
                    }
                )
                continue
            why = "not a local file: a hub dataset, downloaded by ms-swift at its newest revision"
        except OSError as exc:
            why = f"cannot be read ({exc.strerror or exc})"
        out.append({"spec": spec, "sha256": None, "why": why})
    return out


def model_folder(model_path: str, model_id: str, use_hf: bool, environ: Mapping[str, str]) -> Path | None:
    """The folder the trainer loads the model from: `model_path` (what --model gets) when it is a folder here,
    else the hub cache's snapshot of `model_id` (None before ms-swift has downloaded it)."""
    if model_path and recipe_mod.is_dir(model_path):
        return Path(model_path).expanduser()
    return hubcache.cached(model_id, "models", use_hf, environ) if model_id else None
