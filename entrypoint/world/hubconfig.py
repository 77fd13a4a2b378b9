"""A hub model's config.json, read over the network before planning when the model is neither on disk (a
local folder, the hub caches) nor in the shipped table (entrypoint/data/model_configs.json): a few kilobytes
that let the memory planner size the run before ms-swift downloads gigabytes.

The Hugging Face Hub (USE_HF=true) serves it at `<HF_ENDPOINT>/<id>/resolve/main/config.json` (huggingface_hub's
own URL, with HF_TOKEN for gated models); ModelScope, ms-swift's default hub, at
`https://<MODELSCOPE_DOMAIN>/api/v1/models/<id>/repo?Revision=master&FilePath=config.json` (the file endpoint
modelscope's HubApi downloads through). One request, TIMEOUT seconds at most; a failure leaves the model
unestimated, as before, and says why. Never asked with OFFLINE (or a hub's offline variable), nor with
GRPO_RIG_HUB_CONFIG=off (the test suite sets it: its connections stay on loopback).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping

from entrypoint.world import hubcache

TIMEOUT = 5.0  # seconds for the one request: a plan must stay quick where the hub cannot be reached
LIMIT = 1024**2  # bytes: a config.json is a few kilobytes
SWITCH = "GRPO_RIG_HUB_CONFIG"


def url(model: str, use_hf: bool, environ: Mapping[str, str]) -> str:
    """Where the hub serves `model`'s config.json (the module docstring says which endpoints)."""
    if use_hf:
        endpoint = (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        return f"{endpoint}/{model}/resolve/main/config.json"
    domain = environ.get("MODELSCOPE_DOMAIN") or "www.modelscope.cn"
    return f"https://{domain}/api/v1/models/{model}/repo?Revision=master&FilePath=config.json"


def fetch(model: str, use_hf: bool, environ: Mapping[str, str]) -> tuple[dict | None, str]:
    """(config.json's fields, the URL read) or (None, why not: "" when nothing was asked). Never raises."""
    if environ.get(SWITCH) == "off" or not model or not hubcache.is_repo_id(model.split(":")[0]):
        return None, ""
    where = url(model.split(":")[0], use_hf, environ)
    headers = {"Authorization": f"Bearer {environ['HF_TOKEN']}"} if use_hf and environ.get("HF_TOKEN") else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(where, headers=headers), timeout=TIMEOUT
        ) as response:
            data = response.read(LIMIT + 1)
    except urllib.error.HTTPError as exc:
        return None, f"{where} answered {exc.code} {exc.reason}"
    except (OSError, ValueError) as exc:  # URLError, a timeout, a refused connection, a malformed endpoint
        return None, f"{where} could not be read ({getattr(exc, 'reason', exc)})"
    try:
        config = json.loads(data) if len(data) <= LIMIT else None
    except ValueError:
        config = None
    if not isinstance(config, dict) or not (config.get("hidden_size") or config.get("text_config")):
        return None, f"{where} is not a model's config.json"
    return config, where
