"""How a run stands: the one vocabulary of the manifest's `status`, which the supervisor, `train`, the report
and `evaluate` all write or read.

    RUNNING --(the trainer exits 0, or fails after training had finished)--> COMPLETED
    RUNNING --(a child fails, a full disk, the entrypoint fails)--> FAILED
    RUNNING --(SIGINT/SIGTERM)--> STOPPED
    COMPLETED --(the merged export fails; EXPORT_MERGED=true)--> EXPORT_FAILED
    RUNNING, when a later attempt finds it (its process was killed) --> UNRECORDED (that attempt's status)

A `Status` is its text (a `str`): it is written to manifest.json as "completed" and compares equal to the
text read back from it.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    EXPORT_FAILED = "export_failed"  # training completed, the merged export did not
    UNRECORDED = "unrecorded"  # an earlier attempt that never recorded its end

    # the text itself wherever it is printed, formatted or hashed (Enum's own would give "Status.COMPLETED"
    # and hash the member's name), so that a Status and the text read back from a manifest are one value
    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__
