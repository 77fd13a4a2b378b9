"""Where Hugging Face and ModelScope keep downloaded models and datasets (for OFFLINE checks and for
reading a model's config.json without downloading it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def hf_hub(environ: Mapping[str, str]) -> Path:
    """huggingface_hub's cache: HF_HUB_CACHE, else HF_HOME/hub."""
    return Path(
        environ.get("HF_HUB_CACHE") or Path(environ.get("HF_HOME", "~/.cache/huggingface")) / "hub"
    ).expanduser()


def modelscope(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("MODELSCOPE_CACHE", "~/.cache/modelscope/hub")).expanduser()


def cached(repo_id: str, kind: str, use_hf: bool, environ: Mapping[str, str]) -> Path | None:
    """The local copy of hub repo `repo_id` (kind "models" or "datasets"), or None when not downloaded.

    Hugging Face: <hub>/<kind>--org--name; ModelScope: <cache>/<kind>/org/name (older: <cache>/org/name).
    """
    repo_id = repo_id.split(":")[0]
    if use_hf:
        path = hf_hub(environ) / f"{kind}--{repo_id.replace('/', '--')}"
        return path if path.is_dir() else None
    for path in (modelscope(environ) / kind / repo_id, modelscope(environ) / repo_id):
        if path.is_dir():
            return path
    return None
