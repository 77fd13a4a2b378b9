"""Where Hugging Face and ModelScope keep a downloaded model or dataset, as their own libraries answer it
(for OFFLINE runs, which the entrypoint points at the local snapshot, and for reading a model's
config.json without downloading it).

Hugging Face: huggingface_hub's cache lookup (`try_to_load_from_cache`), which follows refs/<revision>
to the snapshot. ModelScope: modelscope's cache root (`modelscope.utils.file_utils`, loaded on its own:
importing the modelscope package takes ~6 s) and its directory naming, in which a dot in the model name
becomes `___` (modelscope 1.28.1 hub/file_download.py:341-354): Qwen/Qwen2.5-0.5B-Instruct lives in
<cache>/models/Qwen/Qwen2___5-0___5B-Instruct. The legacy layout <cache>/<org>/<name> is found too
(modelscope moves it on first use: file_download.py:293-326).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id


def hf_hub(environ: Mapping[str, str]) -> Path:
    """huggingface_hub's cache: HF_HUB_CACHE, else HF_HOME/hub (huggingface_hub constants.py)."""
    return Path(
        environ.get("HF_HUB_CACHE") or Path(environ.get("HF_HOME", "~/.cache/huggingface")) / "hub"
    ).expanduser()


@functools.cache
def _modelscope_file_utils():
    """modelscope/utils/file_utils.py (standard library imports only), without the package's __init__."""
    spec = importlib.util.find_spec("modelscope")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "file_utils.py"
    module_spec = importlib.util.spec_from_file_location("_grpo_rig_modelscope_file_utils", path)
    if module_spec is None or module_spec.loader is None:
        return None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def modelscope(environ: Mapping[str, str]) -> Path:
    """ModelScope's cache root: MODELSCOPE_CACHE, else modelscope's default (~/.cache/modelscope/hub)."""
    utils = _modelscope_file_utils()
    default = utils.get_default_modelscope_cache_dir() if utils else "~/.cache/modelscope/hub"
    return Path(environ.get("MODELSCOPE_CACHE") or default).expanduser()


def expected(repo_id: str, kind: str, use_hf: bool, environ: Mapping[str, str]) -> Path:
    """Where the hub's library keeps repo `repo_id` (kind "models" or "datasets"), for messages."""
    repo_id = repo_id.split(":")[0]
    if use_hf:
        return hf_hub(environ) / f"{kind}--{repo_id.replace('/', '--')}" / "snapshots" / "<revision>"
    org, _, name = repo_id.rpartition("/")
    name = name.replace(".", "___") if kind == "models" else name
    return modelscope(environ) / kind / (org or "damo") / name


def is_repo_id(text: str) -> bool:
    """Whether `text` can name a hub repository ("name" or "org/name", by huggingface_hub's own rule,
    `validate_repo_id`); a path like /models/q05 or ./q05 cannot."""
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def cached(repo_id: str, kind: str, use_hf: bool, environ: Mapping[str, str]) -> Path | None:
    """The local snapshot directory of hub repo `repo_id` (kind "models" or "datasets"), or None when it
    was never downloaded. For models, the directory holds config.json; `--model <it>` loads it without
    asking the hub."""
    repo_id = repo_id.split(":")[0]
    if not is_repo_id(repo_id):  # a local path, or a typo: never in a hub's cache
        return None
    if use_hf:
        if kind == "models":
            found = huggingface_hub.try_to_load_from_cache(
                repo_id, "config.json", cache_dir=hf_hub(environ), repo_type="model"
            )
            return Path(found).parent if isinstance(found, str) else None
        root = hf_hub(environ) / f"{kind}--{repo_id.replace('/', '--')}" / "snapshots"
        snapshots = sorted(root.glob("*")) if root.is_dir() else []
        return snapshots[-1] if snapshots else None
    org, _, name = repo_id.rpartition("/")
    standard = expected(repo_id, kind, use_hf, environ)
    candidates = [standard, modelscope(environ) / org / name]  # the legacy layout
    if kind == "models":
        candidates.append(modelscope(environ) / kind / org / name)  # copied by hand with the hub's name
    for path in candidates:
        if path.is_dir() and (kind != "models" or (path / "config.json").is_file()):
            return path
    return None
