"""docs/benchmarks/one-card-*.json say what their archived runs wrote: each report's first run, read again
from its archive (`run_dir` in it) by bench/one_card_summary.py, has the status, steps, NVML peak, prediction
and seconds per step the report publishes."""

from __future__ import annotations

import json
import tarfile

import pytest

from bench import one_card_summary
from tests.conftest import ROOT

REPORTS = sorted((ROOT / "docs" / "benchmarks").glob("one-card-*.json"))


@pytest.mark.parametrize("report", REPORTS, ids=[r.stem for r in REPORTS])
def test_the_report_is_what_its_archive_holds(report, tmp_path):
    data = json.loads(report.read_text())
    run = data["runs"][0]
    with tarfile.open(ROOT / data["archive"]) as tar:
        wanted = [f"./{run['run_dir']}/manifest.json", f"./{run['run_dir']}/logs/events.jsonl"]
        tar.extractall(tmp_path, members=[tar.getmember(name) for name in wanted], filter="data")
    found = one_card_summary.summary(tmp_path / run["run_dir"])
    assert (found["status"], found["steps"]) == (run["status"], run["steps"]), found
    assert found["peak_nvml_run_processes_gib"] == run["peak_nvml_run_processes_gib"], found
    assert found["predicted_gib"] == run["predicted_gib"], found
    assert abs(found["s_per_step"] - run["s_per_step"]) <= 0.05 * run["s_per_step"], found


def test_the_qlora_learning_figures_are_what_its_archive_holds():
    """one-card-14b.json's `learning_qlora` (QLoRA and bf16 side by side) and the published eval.json files
    are the archived evaluations': arithmetic before, after and the interval of the difference."""
    data = json.loads((ROOT / "docs" / "benchmarks" / "one-card-14b.json").read_text())["learning_qlora"]
    published = {
        "qlora": ROOT / "docs" / "benchmarks" / "learning-qlora" / "eval.json",
        "bf16": ROOT / "docs" / "benchmarks" / "learning-qlora" / "bf16" / "eval.json",
    }
    with tarfile.open(ROOT / data["archive"]) as tar:
        run = tar.getnames()[0].split("/")[0]
        for way, path in published.items():
            archived = json.load(tar.extractfile(f"{run}/{way}/eval.json"))
            assert archived == json.loads(path.read_text())
            s = archived["summary"]["arithmetic"]
            figures = (
                s["base"]["mean"],
                s["adapter"]["mean"],
                s["difference"]["low"],
                s["difference"]["high"],
            )
            report = data[way]
            expected = (report["arithmetic_base"], report["arithmetic_adapter"], *report["ci95"])
            assert [round(x, 3) for x in figures] == list(expected), (way, figures)
            assert (archived["quantized"] is not None) == (
                way == "qlora"
            )  # evaluated on the base it trained on
