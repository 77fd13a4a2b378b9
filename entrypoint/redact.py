"""Secrets never reach the manifest, the plan output, the console or the logs the entrypoint writes.

A key is secret when its name is a known token variable or matches *_TOKEN, *_KEY, *SECRET*,
*PASSWORD* (case-insensitive). Values are replaced, keys kept, so a reader still sees that it was set.

Two ways, both from here: a listing of keys and values (an env, an argv, the KEY=VALUE words of a command
line, a JSON-like structure) has its secret keys' values replaced where it is made (`env`, `argv`, `words`,
`deep`); and everything a command prints goes through `Scrubbing` (cli.main installs it on stdout and
stderr), which replaces the secret values the command line and the environment hold wherever they appear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

REDACTED = "<redacted>"
SECRET_NAMES = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "WANDB_API_KEY", "HUB_TOKEN"}
SECRET_RE = re.compile(r"(_TOKEN$|_KEY$|SECRET|PASSWORD|^TOKEN$|^API_KEY$)", re.IGNORECASE)
# argv flags whose next token is a secret (swift rlhf: --hub_token, --swanlab_token, --api_key ...)
SECRET_FLAG_RE = re.compile(r"^--?[\w-]*(token|secret|password|api[_-]?key)$", re.IGNORECASE)
# ms-swift 3.6.4 arguments whose names end in _key but hold no secret (a ReFT layer's key, VeRA's PRNG seed:
# swift/llm/argument/tuner_args.py); hidden, a rerun could not repeat them
NOT_SECRET = {"REFT_LAYER_KEY", "VERA_PROJECTION_PRNG_KEY"}
MIN_SCRUBBED = 6  # characters: a shorter value is replaced in listings by its key, never in free text


def is_secret(name: str) -> bool:
    """A recipe or environment name whose value is a secret: the hubs' tokens, anything named like one
    (SECRET_RE), less NOT_SECRET."""
    upper = name.upper()
    return upper in SECRET_NAMES or (upper not in NOT_SECRET and bool(SECRET_RE.search(name)))


def is_secret_flag(name: str) -> bool:
    """A command-line flag whose value is a secret (SECRET_FLAG_RE), named with or without its dashes."""
    return bool(SECRET_FLAG_RE.match(name if name.startswith("-") else f"--{name}"))


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


def words(command: list[str]) -> list[str]:
    """A command line as typed (KEY=VALUE words, `--flag value`, `--flag=value`) with secret values
    replaced."""
    out = []
    for word in argv(command):
        key, eq, value = word.partition("=")
        out.append(f"{key}={REDACTED}" if eq and value and is_secret(key.lstrip("-")) else word)
    return out


def values_in(command: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """The secret values a command line (KEY=VALUE words, secret flags) and an environment hold, for
    `Scrubbing` (as values_of: long enough not to match by accident)."""
    found, hide_next = [], False
    for word in command:
        key, eq, value = word.partition("=")
        if hide_next:
            found.append(word)
        elif eq and is_secret(key.lstrip("-")):
            found.append(value)
        hide_next = not eq and bool(SECRET_FLAG_RE.match(word))
    scrubbed = {v for v in found if len(v) >= MIN_SCRUBBED} | set(values_of(environ))
    return sorted(scrubbed, key=len, reverse=True)


class Scrubbing:
    """A text stream that writes through to `stream` with the secret `values` replaced: what a command
    prints (plans, refusals, console lines, summaries) passes here, whoever made the text."""

    def __init__(self, stream: TextIO, values: list[str]) -> None:
        self.stream, self.values = stream, list(values)

    def write(self, s: str) -> int:
        self.stream.write(text(s, self.values))
        return len(s)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer: the stream's own
        return getattr(self.stream, name)


def values_of(secrets: Mapping[str, str]) -> list[str]:
    """Secret values worth scrubbing from free text (long enough not to match by accident)."""
    return sorted(
        {v for k, v in secrets.items() if is_secret(k) and len(v) >= MIN_SCRUBBED}, key=len, reverse=True
    )


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
