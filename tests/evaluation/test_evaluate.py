"""`evaluate`: base model vs the run's adapter on held-out prompts, scored by the run's rewards.

The slow test is a real CPU evaluation of the smoke run's adapter; the others are the bad-input cases,
refused with exit 2 and the fix before any model is loaded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from entrypoint.errors import BadInput
from entrypoint.evaluation import generation, heldout, report, scoring, summary
from entrypoint.record import manifest
from entrypoint.supervise.console import Progress
from tests.conftest import ROOT, clean_env, run_cli

pytestmark = pytest.mark.cli  # each test starts the entrypoint or a process tree


def refused(*pairs: str) -> str:
    start = time.monotonic()
    proc = run_cli("evaluate", *pairs, env=clean_env(), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert time.monotonic() - start < 15  # before any model is loaded
    assert "Traceback" not in proc.stderr
    return proc.stderr


def fake_run(root: Path, name: str, *, adapter: bool, recipe: dict | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    resolved = {k: {"value": v, "source": "test"} for k, v in (recipe or {}).items()}
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "status": "completed" if adapter else "failed",
                "run_name": name,
                "started_at": "2026-12-01T00:00:00+00:00",
                "resolved_recipe": resolved,
                "dataset": ["/data/train.jsonl"],
                "processes": [],
            }
        )
    )
    if adapter:
        (run / "adapter").mkdir()
        (run / "adapter" / "adapter_config.json").write_text("{}")
    return run


def test_no_such_run_names_the_runs_there(tmp_path):
    fake_run(tmp_path, "smoke-20261201-000000", adapter=True)
    err = refused("run=nope", f"OUTPUT_DIR={tmp_path}")
    assert "no run directory with a manifest.json" in err and "smoke-20261201-000000" in err
    # new-user trial: `latest` with no runs read as if a run were named "latest"
    empty = tmp_path / "empty"
    err = refused("run=latest", f"OUTPUT_DIR={empty}")
    assert f"no run under {empty} yet" in err and "train one first" in err


def test_a_run_without_an_adapter_is_refused_with_the_resume_fix(tmp_path):
    fake_run(tmp_path, "half", adapter=False)
    err = refused("run=half", f"OUTPUT_DIR={tmp_path}")
    assert "has no adapter yet (status failed" in err and "start it again with the same RUN_NAME" in err


def test_a_run_on_a_file_without_held_out_rows_asks_for_eval_dataset(tmp_path):
    fake_run(tmp_path, "file", adapter=True, recipe={"DATASET": "/data/train.jsonl"})
    err = refused("run=file", f"OUTPUT_DIR={tmp_path}")
    assert "every row was seen in training" in err and "EVAL_DATASET=" in err


def test_bad_words_are_refused():
    err = refused("run=x", "EVAL_PROMPTS=1", "EVAL_GENERATIONS=lots", "TEMPERATURE=2")
    assert "EVAL_PROMPTS (command line): 1 is below 2" in err and "set EVAL_PROMPTS to 2 or more" in err
    assert "'lots' is not an integer" in err
    assert "TEMPERATURE: is not a key of `evaluate`" in err
    assert "RUN: no run named" in refused("EVAL_PROMPTS=4")


def test_the_engine_is_vllm_only_where_a_gpu_and_vllm_are(tmp_path):
    assert generation.choose_engine("auto", gpu=True, vllm_installed=True) == "vllm"
    assert generation.choose_engine("auto", gpu=False, vllm_installed=True) == "hf"
    assert generation.choose_engine("auto", gpu=True, vllm_installed=False) == "hf"
    assert generation.choose_engine("hf", gpu=True, vllm_installed=True) == "hf"
    with pytest.raises(BadInput, match="torch sees no GPU"):
        generation.choose_engine("vllm", gpu=False, vllm_installed=True)
    err = refused("run=x", "EVAL_ENGINE=sglang", "EVAL_GPU_MEMORY_UTILIZATION=1.5")
    assert "'sglang' is not one of 'auto', 'hf' or 'vllm'" in err
    assert "EVAL_GPU_MEMORY_UTILIZATION (command line): 1.5 is above 1.0" in err
    fake_run(tmp_path, "cpu", adapter=True)
    assert "torch sees no GPU" in refused("run=cpu", f"OUTPUT_DIR={tmp_path}", "EVAL_ENGINE=vllm")


def test_latest_is_the_newest_run(tmp_path):
    fake_run(tmp_path, "old", adapter=True)
    new = fake_run(tmp_path, "new", adapter=True)
    data = json.loads((new / "manifest.json").read_text())
    data["started_at"] = "2026-12-02T00:00:00+00:00"
    (new / "manifest.json").write_text(json.dumps(data))
    assert manifest.find_run("latest", str(tmp_path)) == new


def test_intervals_and_pass_at_1():
    base = {"acc": [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]}
    tuned = {"acc": [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0]]}
    s = summary.summarize(base, tuned)["acc"]
    assert s["base"]["mean"] == pytest.approx(0.25) and s["adapter"]["mean"] == pytest.approx(0.875)
    assert s["pass_at_1"] == {"base": pytest.approx(0.25), "adapter": pytest.approx(0.875)}
    assert s["difference"]["low"] > 0  # every prompt improved or held
    assert "better" in summary.verdict({"acc": s})
    flat = summary.summarize({"f": [[0.5], [0.5]]}, {"f": [[0.5], [0.5]]})["f"]
    assert flat["pass_at_1"] is None and "no clear change" in summary.verdict({"f": flat})


def test_settings_come_from_the_environment_too(tmp_path):
    """`make eval RUN=x EVAL_PROMPTS=4` passes them as environment, and the image sets OUTPUT_DIR=/output:
    both are read (a new user's EVAL_PROMPTS=4 used to be ignored for the default 32); the command line
    wins."""
    proc = run_cli("evaluate", "run=x", env=clean_env(EVAL_PROMPTS="1"), timeout=60)
    assert proc.returncode == 2 and "EVAL_PROMPTS (environment): 1 is below 2" in proc.stderr
    wins = run_cli("evaluate", "run=x", "EVAL_PROMPTS=4", env=clean_env(EVAL_PROMPTS="1"), timeout=60)
    assert "below 2" not in wins.stderr and "no run directory" in wins.stderr
    fake_run(tmp_path, "mine", adapter=False)
    proc = run_cli("evaluate", "run=mine", env=clean_env(OUTPUT_DIR=str(tmp_path)), timeout=60)
    assert proc.returncode == 2 and "has no adapter yet" in proc.stderr  # found through OUTPUT_DIR


def test_a_run_that_did_not_finish_is_evaluated_saying_so_and_which_checkpoint(tmp_path):
    """The adapter of a failed or stopped run is its newest complete checkpoint's."""
    run = fake_run(tmp_path, "cut", adapter=True, recipe={"DATASET": "/data/train.jsonl"})
    data = json.loads((run / "manifest.json").read_text())
    data.update(
        status="failed",
        checkpoint="train/checkpoint-4",
        steps={"completed": 4, "planned": 10},
        failure={"summary": "trainer was killed by SIGKILL (exit status 247) (last step logged: 4 of 10)"},
    )
    (run / "manifest.json").write_text(json.dumps(data))
    proc = run_cli("evaluate", "run=cut", f"OUTPUT_DIR={tmp_path}", env=clean_env(), timeout=60)
    assert (
        "note: the run did not finish (status failed: trainer was killed by SIGKILL (exit status 247) (last "
        "step logged: 4 of 10)); this evaluates its adapter from train/checkpoint-4, step 4 of 10"
    ) in proc.stdout
    assert proc.returncode == 2  # then: no held-out rows (the case above), before any model is loaded
    assert "did not finish (its last attempt ended without recording how)" in report.unfinished(
        {"status": "running"}
    )
    assert report.unfinished({"status": "completed"}) == ""


def test_the_heartbeat_speaks_while_a_batch_runs_and_stops_with_it():
    now = [0.0]
    progress = Progress(8, clock=lambda: now[0])
    progress.now("base model: answering prompts 1-4 of 4", timed=True)
    said: list[str] = []
    with generation.heartbeat(progress, said.append, every=0.01):
        now[0] = 31.0
        deadline = time.monotonic() + 5
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
    count = len(said)
    now[0] = 100.0
    time.sleep(0.05)
    assert count == 1 and said[0].startswith("base model: answering prompts 1-4 of 4, 31 s so far")
    assert len(said) == count  # the thread ended with the block


def test_eval_png_labels_every_bar_with_its_value_zero_included():
    """The countdown reward's bars were 0 for both models: nothing to see in eval.png."""
    summary = {
        name: {
            model: {"mean": mean, "low": max(0.0, mean - 0.05), "high": mean + 0.05}
            for model, mean in (("base", base), ("adapter", tuned))
        }
        for name, base, tuned in (("countdown", 0.0, 0.0), ("format_partial", 0.271, 0.833))
    }
    fig = report.figure({"run": "r", "prompts": {"count": 12}, "summary": summary})
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels.count("0.000") == 2 and "0.271" in labels and "0.833" in labels


def test_held_out_rows_in_the_forms_ms_swift_trains_on_prompt_as_user_turns(tmp_path):
    """A held-out file in a form training accepts (a CSV whose `messages` is text, sharegpt's from/value with
    human/gpt) gives the same prompts as the plain form, not a traceback."""
    from entrypoint.recipe.settings import Settings

    plain = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    sharegpt = tmp_path / "held.jsonl"
    sharegpt.write_text(
        json.dumps(
            {
                "messages": [
                    {"from": "system", "value": "Be brief."},
                    {"from": "human", "value": "What is 2+2?"},
                ],
                "solution": "4",
            }
        )
        + "\n"
    )
    as_csv = tmp_path / "held.csv"
    as_csv.write_text(f'messages,solution\n"{plain!r}",4\n')
    for path in (sharegpt, as_csv):
        rows, _ = heldout.held_out({}, {}, Settings(EVAL_DATASET=str(path)))
        assert heldout.prompt_messages(rows[0], None) == plain and rows[0]["solution"] == "4"


def test_a_bad_eval_dataset_is_refused_naming_the_line_or_why(tmp_path):
    """Cases re-run: a broken held-out file gave a traceback, then 'line 1 column 2' for the file's line 2."""
    fake_run(tmp_path, "r", adapter=True, recipe={"DATASET": "/data/train.jsonl"})
    broken = tmp_path / "held.jsonl"
    broken.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{not json\n')
    (tmp_path / "dir.jsonl").mkdir()
    for path, says in (
        (broken, f"EVAL_DATASET {broken} line 2: is not JSON"),
        (tmp_path / "dir.jsonl", "is a directory"),
        (tmp_path / "no.jsonl", "does not exist"),
    ):
        err = refused("run=r", f"EVAL_DATASET={path}", f"OUTPUT_DIR={tmp_path}")
        assert says in err and "Traceback" not in err, err


def test_a_cut_manifest_is_refused_naming_the_file_and_the_fix(tmp_path):
    run = fake_run(tmp_path, "cut", adapter=True)
    text = (run / "manifest.json").read_text()
    (run / "manifest.json").write_text(text[: len(text) // 2])
    err = refused("run=cut", f"OUTPUT_DIR={tmp_path}")
    assert f"{run / 'manifest.json'} is not readable JSON" in err and "same RUN_NAME" in err


@pytest.mark.parametrize(
    "text, said",
    [
        ("[]", "manifest.json is [] (input should be a valid dictionary)"),
        ('{"resolved_recipe": {"SEED": 5}}', "manifest.json has resolved_recipe.SEED = 5"),
        (
            '{"processes": [{"role": "trainer", "argv": "--model m"}]}',
            'manifest.json has processes.0.argv = "--model m"',
        ),
        (
            '{"dataset": "/data/x.jsonl"}',
            'manifest.json has dataset = "/data/x.jsonl" (input should be a valid list)',
        ),
    ],
)
def test_a_manifest_of_another_shape_is_refused_naming_the_value(tmp_path, text, said):
    run = fake_run(tmp_path, "odd", adapter=True)
    (run / "manifest.json").write_text(text)
    err = refused("run=odd", f"OUTPUT_DIR={tmp_path}")
    assert f"error: run odd: {run}/{said}" in err and "restore manifest.json from a copy" in err, err


@pytest.mark.parametrize("text", ["", '{"r": 8', "[1]", "\udcff"])
def test_an_adapter_config_that_is_not_a_json_object_is_refused_before_a_model_loads(tmp_path, text):
    run = fake_run(tmp_path, "r", adapter=True)
    (run / "adapter" / "adapter_config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    err = refused("run=r", f"OUTPUT_DIR={tmp_path}")
    assert (
        f"error: run r: {run / 'adapter' / 'adapter_config.json'} " in err and "restore it from a copy" in err
    )


def test_a_secret_the_manifest_keeps_redacted_is_no_crash_in_choosing_held_out_rows():
    """The manifest keeps a secret as "<redacted>" in place of its {value, source}; held_out read each as an
    item (TypeError: string indices must be integers)."""
    from entrypoint.recipe.settings import Settings

    data = {
        "resolved_recipe": {
            "HF_TOKEN": "<redacted>",
            "DATASET_GENERATOR": {"value": "countdown", "source": "x"},
            "DATASET_ROWS": {"value": "8", "source": "x"},
        },
        "seed": 1,
    }
    rows, how = heldout.held_out(data, {}, Settings(EVAL_PROMPTS=4))
    assert len(rows) == 4 and "fresh countdown tasks" in how


def test_ctrl_c_during_evaluate_is_one_line_and_128_plus_the_signal(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the models generate: no KeyboardInterrupt traceback, exit 130, and the console says
    nothing was written (SIGTERM takes the same path: signals.install_signal_handlers)."""
    signum = signal.SIGINT
    from entrypoint import cli
    from entrypoint.commands import evaluate as evaluate_command

    fake_run(tmp_path, "r", adapter=True)

    def generating(*args, **kwargs):
        os.kill(os.getpid(), signum)
        time.sleep(30)  # the handler raises here, as it would inside torch's generate

    monkeypatch.setattr(evaluate_command, "_evaluate", generating)
    assert cli.main(["evaluate", "run=r", f"OUTPUT_DIR={tmp_path}"]) == 128 + signum
    out = capsys.readouterr()
    assert f"evaluate stopped by {signal.Signals(signum).name}: no eval.* written" in out.out
    assert "Traceback" not in out.err + out.out


def test_ctrl_c_in_a_library_import_that_put_python_s_handler_back_is_one_line_too(
    tmp_path, monkeypatch, capsys
):
    """A library imported while evaluate runs may restore Python's own SIGINT handler: Ctrl-C then arrives
    as KeyboardInterrupt, which printed a traceback."""
    from entrypoint import cli
    from entrypoint.commands import evaluate as evaluate_command

    fake_run(tmp_path, "r", adapter=True)

    def importing(*args, **kwargs):
        raise KeyboardInterrupt  # what `import torch` raises on Ctrl-C under Python's default handler

    monkeypatch.setattr(evaluate_command, "_evaluate", importing)
    assert cli.main(["evaluate", "run=r", f"OUTPUT_DIR={tmp_path}"]) == 130
    out = capsys.readouterr()
    assert "evaluate stopped by SIGINT: no eval.* written" in out.out and "Traceback" not in out.err + out.out


@pytest.mark.parametrize(
    "module, said",
    [
        ("pydantic", "grpo-rig: stopped by SIGINT before the command started: nothing written"),
        ("huggingface_hub", "grpo-rig: stopped by SIGINT"),
        ("swift", "evaluate stopped by SIGINT: no eval.* written"),
    ],
)
def test_ctrl_c_while_the_entrypoint_imports_its_libraries_is_one_line_and_130(tmp_path, module, said):
    """Ctrl-C arrives as KeyboardInterrupt, raised here by an import hook at `module`'s import: before any
    command's handlers are in place (the entrypoint's own imports, the commands'), or inside evaluate where a
    library restored Python's handler (ms-swift's plugins, imported to load the run's rewards)."""
    fake_run(tmp_path, "r", adapter=True)
    code = (
        "import importlib.abc, runpy, sys\n"
        "class CtrlC(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}: raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, CtrlC())\n"
        f"sys.argv = ['entrypoint', 'evaluate', 'run=r', 'OUTPUT_DIR={tmp_path}', "
        f"'EVAL_DATASET={tmp_path}/x.jsonl']\n"
        "runpy.run_module('entrypoint', run_name='__main__')\n"
    )
    (tmp_path / "x.jsonl").write_text('{"messages": [{"role": "user", "content": "1+1"}]}\n' * 4)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and said in proc.stderr + proc.stdout, proc.stderr


def test_held_out_rows_the_run_s_rewards_cannot_read_are_refused_before_a_model_loads(tmp_path):
    """Users' trial: EVAL_DATASET without the countdown reward's columns generated for 8 min 44 s, then died
    with "TypeError: ... missing 2 required positional arguments: 'nums' and 'target'" (rc 1). Each reward
    now scores the first rows with an empty completion first: refused, naming the reward and the columns."""
    run = fake_run(tmp_path, "r", adapter=True)
    data = json.loads((run / "manifest.json").read_text())
    data["processes"] = [
        {
            "role": "trainer",
            "argv": ["python", "rlhf.py", "--model", "some/model", "--reward_funcs", "countdown", "format"],
        }
    ]
    (run / "manifest.json").write_text(json.dumps(data))
    rows = tmp_path / "heldout.jsonl"
    rows.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}) + "\n" for i in range(4))
    )
    proc = run_cli(
        "evaluate", "run=r", f"OUTPUT_DIR={tmp_path}", f"EVAL_DATASET={rows}", env=clean_env(), timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the run's reward countdown cannot score the rows of EVAL_DATASET" in proc.stderr, proc.stderr
    assert "nums" in proc.stderr and "their columns: messages" in proc.stderr
    assert "evaluating r:" not in proc.stdout and "Traceback" not in proc.stderr


def test_the_scored_completions_are_kept_one_line_each(tmp_path):
    prompts = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    texts = [["x", "y"], ["z", "w"]]
    report.write_completions(
        tmp_path / "c.jsonl", prompts, {"base": (texts, {"r": [[0.0, 1.0], [1.0, 0.0]]})}
    )
    lines = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and lines[1] == {
        "model": "base",
        "prompt": 0,
        "messages": prompts[0],
        "completion": "y",
        "rewards": {"r": 1.0},
    }


def test_held_out_rows_missing_columns_the_others_have_are_refused():
    """Users' trial: two complete rows, then rows without nums/target passed the check and scored 0."""
    rows = [{"messages": [{"role": "user", "content": "q"}], "nums": [1, 2], "target": 3}] * 2 + [
        {"messages": [{"role": "user", "content": "q"}]}
    ] * 2
    prompts = [r["messages"] for r in rows]
    with pytest.raises(BadInput) as exc:
        scoring.probe_rewards({"r": lambda *a, **k: [0.0]}, rows, prompts, "EVAL_DATASET /x.jsonl")
    message = exc.value.problems[0].message
    assert "2 of the 4 rows of EVAL_DATASET /x.jsonl lack columns the others have" in message
    assert "row 3 lacks nums, target" in message


def test_a_qlora_run_on_a_machine_without_a_gpu_is_refused_before_a_model_loads(tmp_path):
    """The adapter was trained on a 4-bit base: evaluating it on bf16 weights measures another model, and
    bitsandbytes computes on a GPU only; refused in seconds, naming where to evaluate."""
    run = fake_run(tmp_path, "q", adapter=True)
    data = json.loads((run / "manifest.json").read_text())
    argv = ["python", "rlhf.py", "--model", "some/model", "--quant_method", "bnb", "--quant_bits", "4"]
    data["processes"] = [{"role": "trainer", "argv": argv}]
    (run / "manifest.json").write_text(json.dumps(data))
    err = refused("run=q", f"OUTPUT_DIR={tmp_path}")
    assert "trained its adapter on a 4-bit base (QUANT_METHOD=bnb)" in err and "on the GPU machine" in err


@pytest.mark.parametrize(
    ("bits", "asked", "engine", "vllm_kwargs"),
    [
        (0, "vllm", "vllm", {}),
        (4, "vllm", "vllm", {"quantization": "bitsandbytes", "load_format": "bitsandbytes"}),
        (8, "vllm", "hf", None),  # vLLM 0.8.5 quantizes in flight to 4 bits only
        (4, "hf", "hf", None),
    ],
)
def test_a_quantized_run_is_evaluated_on_the_base_as_its_trainer_loaded_it(bits, asked, engine, vllm_kwargs):
    quantized = generation.Quantized.of(bits, "nf4")
    assert generation.engine_for(asked, quantized, gpu=True) == engine
    if vllm_kwargs is not None:
        assert generation.vllm_quantization(quantized) == vllm_kwargs
