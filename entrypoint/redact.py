"""Secrets never reach the manifest, the plan output or the logs the entrypoint writes.

A key is secret when its name is a known token variable or matches *_TOKEN, *_KEY, *SECRET*,
*PASSWORD* (case-insensitive). Values are replaced, keys kept, so a reader still sees that it was set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"
SECRET_NAMES = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "WANDB_API_KEY", "HUB_TOKEN"}
SECRET_RE = re.compile(r"(_TOKEN$|_KEY$|SECRET|PASSWORD|^TOKEN$|^API_KEY$)", re.IGNORECASE)
# argv flags whose next token is a secret (swift rlhf: --hub_token, --swanlab_token, --api_key ...)
SECRET_FLAG_RE = re.compile(r"^--?[\w-]*(token|secret|password|api[_-]?key)$", re.IGNORECASE)


def is_secret(name: str) -> bool:
    return name.upper() in SECRET_NAMES or bool(SECRET_RE.search(name))


def env(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy with secret values replaced."""
    return {k: (REDACTED if is_secret(k) and v else v) for k, v in mapping.items()}


def argv(words: list[str]) -> list[str]:
    """A copy of an argv with the values of secret flags replaced."""
    out, hide = [], False
    for w in words:
        out.append(REDACTED if hide else w)
        hide = bool(SECRET_FLAG_RE.match(w))
    return out


def values_of(secrets: Mapping[str, str]) -> list[str]:
    """Secret values worth scrubbing from free text (long enough not to match by accident)."""
    return sorted({v for k, v in secrets.items() if is_secret(k) and len(v) >= 6}, key=len, reverse=True)


def text(s: str, secret_values: list[str]) -> str:
    for v in secret_values:
        s = s.replace(v, REDACTED)
    return s


def deep(obj: Any, secret_values: list[str]) -> Any:
    """Redact a JSON-like structure: secret keys of dicts, and known secret values anywhere in strings."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret(k) and obj[k] else deep(v, secret_values))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [deep(v, secret_values) for v in obj]
    if isinstance(obj, str):
        return text(obj, secret_values)
    return obj
