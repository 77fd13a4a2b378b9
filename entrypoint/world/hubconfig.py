"""A hub model's config.json, read over the network before planning when the model is neither on disk (a
local folder, the hub caches) nor in the shipped table (entrypoint/data/model_configs.json): a few kilobytes
that let the memory planner size the run before ms-swift downloads gigabytes.

The Hugging Face Hub (USE_HF=true) serves it at `<HF_ENDPOINT>/<id>/resolve/main/config.json`
(huggingface_hub's own URL, with HF_TOKEN for gated models); ModelScope, ms-swift's default hub, at
`https://<MODELSCOPE_DOMAIN>/api/v1/models/<id>/repo?Revision=master&FilePath=config.json` (the file endpoint
modelscope's HubApi downloads through). One request, TIMEOUT seconds at most in all (a deadline, not a
per-read timeout a trickling server could stretch); a failure leaves the model unestimated, as before, and
says why. Never asked with OFFLINE (or a hub's offline variable), nor with
GRPO_RIG_HUB_CONFIG=off (the test suite sets it: its connections stay on loopback).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from entrypoint.world import hubcache

TIMEOUT = (
    5.0  # seconds for the one request, all of it: a plan must stay quick where the hub cannot be reached
)
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
    """(config.json's fields, the URL read) or (None, why not: "" when nothing was asked). Never raises;
    returns within TIMEOUT seconds whatever the hub does (_get)."""
    if environ.get(SWITCH) == "off" or not model or not hubcache.is_repo_id(model.split(":")[0]):
        return None, ""
    where = url(model.split(":")[0], use_hf, environ)
    headers = {"Authorization": f"Bearer {environ['HF_TOKEN']}"} if use_hf and environ.get("HF_TOKEN") else {}
    data, why = _get(where, headers, TIMEOUT)
    if data is None:
        return None, why
    try:
        config = json.loads(data) if len(data) <= LIMIT else None
    except ValueError:  # not JSON (an HTML error page, a proxy's login form), or not UTF-8
        config = None
    if not isinstance(config, dict) or not (config.get("hidden_size") or config.get("text_config")):
        return None, f"{where} is not a model's config.json"
    return config, where


def _get(where: str, headers: Mapping[str, str], seconds: float) -> tuple[bytes | None, str]:
    """(the body, "") or (None, why), within `seconds` in all: name resolution, connecting, the headers and
    the body. urllib's timeout bounds each socket operation, so a hub (or a proxy) that trickles a byte at a
    time never ends its read; the request runs in a daemon thread, read chunk by chunk against one deadline,
    and is left behind (to end at its next read) when the deadline passes."""
    deadline = time.monotonic() + seconds
    answer: list[tuple[bytes | None, str]] = []

    def request() -> None:
        try:
            answer.append(_read(where, headers, deadline, seconds))
        except urllib.error.HTTPError as exc:
            answer.append((None, f"{where} answered {exc.code} {exc.reason}"))
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, a bad status
            answer.append((None, f"{where} could not be read ({getattr(exc, 'reason', None) or exc})"))

    worker = threading.Thread(target=request, name="hub-config", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    return answer[0] if answer else (None, f"{where} did not answer within {seconds:g} s")


def _read(
    where: str, headers: Mapping[str, str], deadline: float, seconds: float
) -> tuple[bytes | None, str]:
    """The body, read until it ends, passes LIMIT, or the deadline passes (then None and why)."""
    request = urllib.request.Request(where, headers=dict(headers))
    with urllib.request.urlopen(request, timeout=max(0.1, deadline - time.monotonic())) as response:
        data = b""
        while len(data) <= LIMIT:
            if time.monotonic() >= deadline:
                return None, f"{where} was still sending after {seconds:g} s"
            chunk = response.read1(64 * 1024)
            if not chunk:
                break
            data += chunk
    return data, ""
