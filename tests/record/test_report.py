"""Run reports (entrypoint/record/report.py): a failed run's training curves say so."""

from __future__ import annotations

import json

import pytest

from entrypoint.record import export, report


def rows(steps: int, planned: int) -> list[dict]:
    return [
        {
            "reward": 0.1 * s,
            "rewards/Format/mean": 0.1 * s,
            "loss": 0.0,
            "global_step/max_steps": f"{s}/{planned}",
        }
        for s in range(1, steps + 1)
    ]


@pytest.mark.cli
def test_a_failed_runs_curves_are_marked_with_its_status_and_last_step(tmp_path):
    """The curves of a run that failed at step 3 of 10 looked like those of a finished run."""
    assert report.unfinished(rows(3, 10), "failed") == "FAILED after step 3 of 10: not a finished run"
    assert report.unfinished(rows(2, 4), "stopped").startswith("STOPPED after step 2 of 4")
    assert report.unfinished(rows(4, 4), "completed") == ""
    log = tmp_path / "logging.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows(3, 10)))
    assert report.training_curves(log, tmp_path / "failed.png", "run (smoke)", status="failed")
    assert report.training_curves(log, tmp_path / "done.png", "run (smoke)")
    assert (tmp_path / "failed.png").read_bytes() != (tmp_path / "done.png").read_bytes()


def test_one_step_without_per_function_rewards_draws_the_total_without_warnings(tmp_path):
    """Cases re-run: a run cut after step 1 printed matplotlib's 'No artists with labels' UserWarning."""
    import warnings

    log = tmp_path / "logging.jsonl"
    log.write_text(json.dumps({"reward": 0.5, "loss": 0.1, "global_step/max_steps": "1/4"}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert report.training_curves(log, tmp_path / "one.png", status="failed")


def test_a_write_that_fails_leaves_the_previous_file_and_no_temporary(tmp_path):
    """Cases re-run: the run report on a full disk left a 0-byte README.md."""
    target = tmp_path / "README.md"
    target.write_text("previous")
    try:
        with export.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")
    except OSError:
        pass
    assert target.read_text() == "previous" and sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]
