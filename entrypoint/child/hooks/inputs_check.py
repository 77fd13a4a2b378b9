"""GRPO_RIG_INPUTS=PATH: the trainer checks that the dataset rows it loaded are the ones the run recorded.

The launcher hashes the dataset files into the manifest (`inputs`) and into PATH (the run's
logs/inputs.json: {"files": [{"path", "sha256"}, ...]}) before the trainer starts; ms-swift reads them minutes
later (SwiftSft._get_dataset, ms-swift 3.6.4). A file changed in between (a dataset regenerated, a row
appended) would train other rows under the recorded sha256. Right after ms-swift has loaded them, the first
process of each node hashes each file again; one that differs ends the run naming it (`grpo-rig inputs
check:`), before any step.
"""

from __future__ import annotations

import hashlib
import json
import os

from entrypoint.child import runtime
from entrypoint.child.hooks.base import After, Hook, Target
from entrypoint.child.wire import INPUTS_MARK

SFT = "swift.llm.train.sft"


class InputsChangedError(RuntimeError):
    """A dataset file differs from what the run recorded: the rows loaded are not the recorded ones."""


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def changed(record_path: str) -> list[str]:
    """The recorded files whose sha256 differs now (or that are gone), in words; [] when all match."""
    with open(record_path, encoding="utf-8") as f:
        files = json.load(f).get("files", [])
    out = []
    for item in files:
        path, want = item.get("path"), item.get("sha256")
        if not path or not want:
            continue
        try:
            got = _sha256(path)
        except OSError as exc:
            out.append(f"{path} cannot be read now ({exc.strerror or exc})")
            continue
        if got != want:
            out.append(f"{path} has sha256 {got[:12]}... now, {want[:12]}... when the run recorded it")
    return out


def _check_after_load(sft, record_path: str) -> None:
    cls = runtime.need(sft, "SwiftSft", SFT)
    load = runtime.need(cls, "_get_dataset", f"{SFT}.SwiftSft")

    def _get_dataset(self, *args, **kwargs):
        result = load(self, *args, **kwargs)
        if os.environ.get("LOCAL_RANK", "0") == "0":
            try:
                differ = changed(record_path)
            except (OSError, ValueError) as exc:
                runtime.not_installed("inputs_check", f"cannot read {record_path} ({exc})")
                return result
            if differ:
                raise InputsChangedError(
                    f"{INPUTS_MARK} the dataset changed after the run recorded it: "
                    f"{'; '.join(differ)}. The rows loaded are not the recorded ones; leave the "
                    "file alone while a run starts, then run the same command again"
                )
        return result

    cls._get_dataset = _get_dataset


def install(value: str, after: After) -> None:
    """On with the path of the run's inputs record (the plan sets it for the trainer)."""
    if value:
        after.patch(SFT, lambda sft: _check_after_load(sft, value))


HOOK = Hook(
    name="inputs_check",
    variable="GRPO_RIG_INPUTS",
    targets=(Target(SFT, "SwiftSft._get_dataset", "b2090d396fc98c21"),),
    upstream=("ms-swift==3.6.4",),
    why="The manifest names the dataset rows a run trained on by their sha256, hashed by the launcher before "
    "the trainer starts; ms-swift loads the files minutes later. The trainer hashes them again right after "
    "loading, so a file changed in between ends the run before step 1 instead of training unrecorded rows.",
    saves="no time: a run whose manifest names the rows it read (rerun compares them)",
    delete_when="when ms-swift records the fingerprint of the data it loaded (datasets' own fingerprint of "
    "the loaded files in its logs or checkpoint) and record/rerun.py reads that instead",
    install=install,
)
