"""Checkpoints and exports on the output volume: never half-written, always hashed.

ms-swift (HF Trainer) writes `train/checkpoint-<step>/` with `trainer_state.json` saved after the weights,
optimizer and RNG state (transformers 4.51 `Trainer._save_checkpoint`), so a checkpoint is complete when
its weights and a parseable `trainer_state.json` are there. Incomplete ones (a save cut short) are never
exported or resumed from.

Exports are assembled in a hidden temporary directory beside the target and renamed into place: a reader
of the volume sees either the previous export or the new one, never a partial file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
# Full fine-tuning checkpoints: weights (possibly sharded) and config.
FULL_MODEL_GLOBS = (
    "*.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "vocab*",
    "merges.txt",
)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def checkpoint_step(path: Path) -> int | None:
    m = CHECKPOINT_RE.match(path.name)
    return int(m.group(1)) if m else None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def trainer_state(checkpoint: Path) -> dict[str, Any] | None:
    """The checkpoint's trainer_state.json as HF's Trainer writes it (TrainerState.save_to_json): an object
    whose global_step and max_steps are whole numbers. None where it is missing, unreadable, or JSON of
    another shape (`[]`, `3`): such a file is as good as none, and every reader of a checkpoint's steps
    (train.completed_steps) reads it through here (a `[]` crashed them with AttributeError)."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not _whole(state.get("global_step", 0)):
        return None
    return state if state.get("max_steps") is None or _whole(state["max_steps"]) else None


def incomplete_why(checkpoint: Path) -> str:
    """Why a checkpoint is not one to resume from or export ("" when it is): its trainer_state.json, written
    last, missing or not the trainer's state, or its weights missing."""
    if trainer_state(checkpoint) is None:
        return (
            "its trainer_state.json is not the trainer's state: a JSON object with a whole global_step"
            if (checkpoint / "trainer_state.json").is_file()
            else "no trainer_state.json: an interrupted save"
        )
    has_adapter = all((checkpoint / f).is_file() for f in ADAPTER_FILES)
    has_full = (checkpoint / "config.json").is_file() and any(checkpoint.glob("*.safetensors"))
    return "" if has_adapter or has_full else "no weights: an interrupted save"


def is_complete(checkpoint: Path) -> bool:
    """Weights present and trainer_state.json the trainer's state (it is written last)."""
    return not incomplete_why(checkpoint)


def checkpoints(train_dir: Path) -> list[Path]:
    """checkpoint-<step> directories, oldest first."""
    if not train_dir.is_dir():
        return []
    found = [p for p in train_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step)


def incomplete(train_dir: Path) -> list[Path]:
    """checkpoint-<step> directories whose save never finished (a full disk, a kill), oldest first."""
    return [c for c in checkpoints(train_dir) if not is_complete(c)]


def tree_bytes(root: Path) -> int:
    """The bytes of every file under `root`."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def newest_complete(train_dir: Path) -> Path | None:
    return next((c for c in reversed(checkpoints(train_dir)) if is_complete(c)), None)


def hash_tree(root: Path, base: Path) -> dict[str, str]:
    """{path relative to `base`: sha256} for every file under `root`."""
    return {str(p.relative_to(base)): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def replace_dir(tmp: Path, target: Path) -> None:
    """Move `tmp` to `target`, replacing an existing `target` without a moment of a partial directory."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(target)


def export_checkpoint(checkpoint: Path, run_dir: Path, base_model: str) -> dict[str, str]:
    """Export `checkpoint` into `run_dir/adapter/` (LoRA) or `run_dir/model/` (full fine-tuning).

    The adapter's `base_model_name_or_path` is set to `base_model` (the model id the recipe named, not
    the cache path ms-swift loaded it from). Returns {relative path: sha256} of the exported files.
    """
    lora = all((checkpoint / f).is_file() for f in ADAPTER_FILES)
    target = run_dir / ("adapter" if lora else "model")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=run_dir))
    try:
        if lora:
            shutil.copy2(checkpoint / "adapter_model.safetensors", tmp / "adapter_model.safetensors")
            config = json.loads((checkpoint / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = base_model
            (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            if (checkpoint / "additional_config.json").is_file():
                shutil.copy2(checkpoint / "additional_config.json", tmp / "additional_config.json")
        else:
            for pattern in FULL_MODEL_GLOBS:
                for f in checkpoint.glob(pattern):
                    if f.is_file():
                        shutil.copy2(f, tmp / f.name)
        for f in tmp.iterdir():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o755)
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return hash_tree(target, run_dir)


@contextlib.contextmanager
def atomic_path(dst: Path) -> Iterator[Path]:
    """A temporary path beside `dst` to write; on success it becomes `dst` (mode 0644, os.replace: atomic on
    one filesystem), on any failure it is removed: a full disk leaves the previous file or none, never a
    truncated one or a temporary behind (a 0-byte file would pass for a result). Raises what the block
    raises."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: object) -> None:
    """Write JSON to `path` through a temporary file (atomic_path), synced before it replaces `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def copy_atomic(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` through a temporary file beside it (atomic_path). Raises OSError."""
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def reserve(path: Path, nbytes: int) -> Path:
    """Allocate `nbytes` on the volume at `path` (posix_fallocate: the blocks are really taken), so that a
    run's last words fit when the disk fills up during it (`release` before writing them). Raises OSError
    (ENOSPC when they are not there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return path


def release(path: Path) -> None:
    """Give a `reserve` back to the volume (nothing when it is already gone)."""
    path.unlink(missing_ok=True)
