"""deaths.py: exit statuses decoded, causes named, start-up dumps folded, the end of a failed run
explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoint.supervise import deaths, monitor
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("returncode", "reported", "name", "said"),
    [
        (247, None, "SIGKILL", "was killed by SIGKILL (exit status 247)"),  # ms-swift's CLI: sys.exit(-9)
        (137, None, "SIGKILL", "was killed by SIGKILL (exit status 137)"),  # a shell's 128 + 9
        (139, None, "SIGSEGV", "was killed by SIGSEGV (exit status 139)"),
        (-9, None, "SIGKILL", "was killed by SIGKILL"),  # Popen's own
        (-11, None, "SIGSEGV", "was killed by SIGSEGV"),
        (1, "SIGABRT", "SIGABRT", "exited with status 1 (torchrun reports a process killed by SIGABRT)"),
        (7, None, None, "exited with status 7"),
        (1, None, None, "exited with status 1"),
    ],
)
def test_exit_statuses_are_decoded(returncode, reported, name, said):
    assert deaths.signal_of(returncode, reported) == name
    assert deaths.describe_exit(returncode, reported) == said


def test_the_likely_cause_of_a_sigkill_comes_from_the_oom_kill_count():
    assert "the kernel's out-of-memory killer (its kill count rose from 0 to 1" in (
        deaths.likely_cause("SIGKILL", (0, 1))
    )
    assert deaths.likely_cause("SIGKILL", (2, 2)).startswith("someone or something stopped it")
    unknown = deaths.likely_cause("SIGKILL", (None, None))
    assert "out-of-memory killer, or someone or something" in unknown and "memory.events" in unknown
    assert "native code" in deaths.likely_cause("SIGSEGV", (0, 0))
    assert deaths.likely_cause(None, (0, 0)) == ""


def test_start_up_dumps_of_a_real_ms_swift_log_are_folded_out_of_the_last_lines():
    """tests/fixtures/smoke-trainer.log is ms-swift 3.6.4's output of a smoke run: RLHFArguments(...) is 400
    lines, the model's module tree 128, ModelInfo with its LlamaConfig {...} 30."""
    lines = (ROOT / "tests" / "fixtures" / "smoke-trainer.log").read_text().splitlines()
    tail = deaths.Tail(40)
    for line in lines[
        : lines.index(")", 472) + 1
    ]:  # up to the end of the module tree: a death right after it
        tail.append(line)
    shown = list(tail)
    assert not [x for x in shown if x.startswith(("  (", "    (", "adam_beta", "_n_gpu="))]  # no dump line
    folded = [x for x in shown if "lines of start-up output, left out here" in x]
    heads = (
        "[INFO:swift] args: RLHFArguments(",
        "[INFO:swift] model_info: ModelInfo(",
        "[INFO:swift] model.generation_config: GenerationConfig {",
        "[INFO:swift] train_dataset: Dataset({",
        "[INFO:swift] model: PeftModelForCausalLM(",
    )
    assert len(folded) == len(heads) and all(x.startswith(h) for x, h in zip(folded, heads, strict=True))
    assert "[INFO:swift] args: RLHFArguments( ... (401 lines of start-up output" in "\n".join(shown)
    assert "[INFO:swift] Start time of running main" in "\n".join(shown)  # ordinary lines stay


def test_a_dump_cut_short_by_the_death_does_not_hide_what_followed():
    tail = deaths.Tail(10)
    for line in ["[INFO:swift] model: PeftModelForCausalLM(", "  (base_model): LoraModel(", "Killed"]:
        tail.append(line)
    assert list(tail) == [
        "[INFO:swift] model: PeftModelForCausalLM( ... (2 lines of start-up output, left out here; "
        "the log has them)",
        "Killed",
    ]


def test_a_traceback_in_the_last_lines_keeps_its_exception_only():
    """Cases re-run: a full disk's last lines held torch's save traceback twice, its frames labelled as
    'lines of start-up output' (a frame ending in '(' looked like a dump)."""
    tail = deaths.Tail(20)
    lines = [
        "step 2",
        "Traceback (most recent call last):",
        '  File "trainer.py", line 3, in _save',
        "    _save(",
        "RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed writing file",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "x.py", line 1, in inner_training_loop(',
        "[rank0]: RuntimeError: unexpected pos 64 vs 0",
    ]
    for line in lines:
        tail.append(line)
    assert list(tail) == [
        "step 2",
        "a traceback (its frames are in the log):",
        "RuntimeError: [enforce fail at inline_container.cc:815] . PytorchStreamWriter failed writing file",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "a traceback (its frames are in the log):",
        "[rank0]: RuntimeError: unexpected pos 64 vs 0",
    ]


def test_the_line_that_says_what_happened():
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 1 has a total capacity of 23.5 GiB"
    )
    assert deaths.cuda_oom(["x", oom]) == {"gpu": 1, "tried": "2.00 GiB"}
    assert deaths.disk_full(["OSError: [Errno 28] No space left on device"]) is not None
    mark = f"{deaths.REWARD_MARK} reward function countdown returned nan for row 3"
    assert deaths.reward_failure(["Traceback", mark]) == "reward function countdown returned nan for row 3"


def test_a_reward_failure_is_the_summary_of_the_run():
    tail = [
        "Traceback (most recent call last):",
        "grpo-rig site: x",
        f"{deaths.REWARD_MARK} reward function f raised",
    ]
    lines = deaths.explain("trainer", 1, "exited with status 1", tail, deaths.Context(step=0, checkpoint=""))
    assert lines == [
        "trainer stopped by the reward check: reward function f raised (before its first step)",
        "no complete checkpoint yet: fix the reward function named above, then run the same command again "
        "to start over",  # the same command alone fails the same way (cases re-run)
    ]


def test_the_oom_kill_count_is_the_machine_s_first_as_a_global_oom_kill_leaves_the_cgroup_s_unchanged(
    tmp_path,
):
    """/proc/vmstat's oom_kill counts every OOM kill on the machine (the global OOM killer included, which a
    cgroup's memory.events does not count); the cgroup's count is the fallback where vmstat has none."""
    vmstat, events = tmp_path / "vmstat", tmp_path / "memory.events"
    vmstat.write_text("nr_free_pages 12\noom_kill 7\n")
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    assert monitor.oom_kills((vmstat, events)) == 7
    assert monitor.oom_kills((tmp_path / "none", events)) == 0
    assert monitor.oom_kills((tmp_path / "none",)) is None
    assert monitor.OOM_FILES[0] == Path("/proc/vmstat")


def test_a_rollout_that_never_became_healthy_or_a_stall_is_told_which_bound_to_raise():
    """The cases re-run: "run the same command again to start over" after ROLLOUT_STARTUP_TIMEOUT ran out
    would time out the same way; the fix names the bound where only slowness is the cause."""
    slow = deaths.explain(
        "rollout", None, "was not healthy after 8 s (ROLLOUT_STARTUP_TIMEOUT); ...", [], deaths.Context()
    )
    assert "raise ROLLOUT_STARTUP_TIMEOUT if the server is only slow to start" in slow[-1], slow
    stalled = deaths.explain(
        "trainer", None, "stalled: step 3/5: generating completions, ...", [], deaths.Context()
    )
    assert "raise STALL_TIMEOUT if a step can truly take this long" in stalled[-1], stalled
    assert deaths.explain("trainer", 1, "exited with status 1", [], deaths.Context())[-1] == (
        "no complete checkpoint yet: run the same command again to start over"
    )
