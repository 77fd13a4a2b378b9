"""The console a person follows: a real smoke run's trainer output (tests/fixtures/
smoke-trainer.log, 600 lines: the argument dump, the model structure, tqdm, library notices, four step
dicts) comes out as a few milestones and one line per step; failures always show; a quiet console gets a
heartbeat naming the phase."""

from __future__ import annotations

from entrypoint.supervise.console import Console, Progress
from tests.conftest import ROOT

LOG = (ROOT / "tests" / "fixtures" / "smoke-trainer.log").read_text().splitlines()
EVENTS = ROOT / "tests" / "fixtures" / "smoke-events.jsonl"


def shown(console: Console, lines: list[str], role: str = "trainer") -> list[str]:
    return [s for s in (console.shown(role, ln) for ln in lines) if s is not None]


def test_a_smoke_run_fits_on_a_screen_with_a_line_per_step():
    clock = iter(range(0, 10_000, 30))
    out = shown(Console(clock=lambda: next(clock)), LOG)
    assert len(LOG) > 500 and len(out) <= 15, out
    steps = [s for s in out if s.startswith("step ")]
    assert out[-1].startswith("training finished in 2.2 min") or any(
        s.startswith("training finished") for s in out
    )
    assert [s.split(" |")[0] for s in steps] == ["step 1/4", "step 2/4", "step 3/4", "step 4/4"]
    assert steps[0].startswith("step 1/4 | reward 0.281 (std 0.036) | ")
    assert "s/step" in steps[1] and "elapsed" in steps[1]
    assert any("Loading the model" in s for s in out) and any("Saving model checkpoint" in s for s in out)
    assert not any("lora_A" in s or "adam_beta1" in s or "it/s]" in s for s in out)


def test_failures_always_show_and_a_traceback_folds_to_its_exception():
    """The cases re-run saw 60 lines of torch's save traceback above the run's one-line 'disk full'
    summary: the frames stay in the log, the exception line shows, the log is named once per role."""
    console = Console()
    lines = [
        "(q_proj): Linear(in_features=576)",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "    raise RuntimeError('boom')",
        "RuntimeError: boom",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "y.py", line 2',
        "[rank0]: OSError: [Errno 28] No space left on device",
    ]
    assert shown(console, lines) == [
        "a traceback (its frames go to logs/trainer.log; CONSOLE=all shows them here):",
        "RuntimeError: boom",
        "[rank0]: OSError: [Errno 28] No space left on device",
    ]
    assert Console().shown(
        "rollout", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert Console().shown("trainer", "FutureWarning: `tokenizer` is deprecated") is None
    assert Console(show_all=True).shown("trainer", "(q_proj): Linear") == "(q_proj): Linear"


def test_the_eta_comes_from_the_steps_after_the_first():
    """The recorded smoke run: step 1 took 45 s (the warm-up), steps 2-4 about 28 s each. ms-swift's ETA
    after step 1 extrapolates from step 1 (2m 15s here; a new user read "13 min"). After step 1
    the line says when an ETA comes; after that, the pace since step 1."""
    out = shown(Console(), LOG)
    etas = [s.rsplit(" | ", 1)[1] for s in out if s.startswith("step ")]
    assert etas == ["ETA after step 2", "ETA 56s", "ETA 28s", "ETA 0s"]


def test_the_heartbeat_says_what_the_trainer_is_doing(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(EVENTS.read_text().splitlines()[:2]) + "\n")  # step 1's rollout
    now = [100.0]
    console = Console(events=events, clock=lambda: now[0], total_steps=4)
    now[0] = 160.0
    assert console.heartbeat() == (
        "step 1/4: training on 8 completions (generated in 14 s), 60 s since the start "
        "(full output: logs/trainer.log)"
    )
    events.write_text(EVENTS.read_text())  # then step 1 trained and logged its line
    console.shown("trainer", next(ln for ln in LOG if "'global_step/max_steps': '1/4'" in ln))
    now[0] = 190.0
    assert console.heartbeat().startswith("step 2/4: generating completions, 30 s into this step")
    assert "loading the model and the data" in Console(events=None).heartbeat()


def test_steps_are_named_alike_on_step_lines_and_heartbeats(tmp_path):
    """One spelling, step N/M, where there were three ("step 1: training ...", "step 2 of 4: ...", "step 1/4
    | ..."); the total from the plan's MAX_STEPS until the first step line gives it."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"t": 1, "phase": "generate", "seconds": 12.7, "step": 0, "completions": 8}\n')
    console = Console(events=events, clock=lambda: 0.0, total_steps=4)
    said = [console.heartbeat()]
    said += shown(console, [next(ln for ln in LOG if "'global_step/max_steps': '1/4'" in ln)])
    said.append(console.heartbeat())
    assert [s.split(" ")[1].rstrip(":") for s in said] == ["1/4", "1/4", "2/4"], said
    # without MAX_STEPS (epochs) the total is known from the first step line on
    assert Console(events=events, clock=lambda: 0.0).heartbeat().startswith("step 1: ")


def test_before_the_first_step_the_heartbeat_follows_the_start_up_marks(tmp_path):
    """A new user's heartbeat said "loading the model and the data" for 5 minutes while the trainer was
    generating its first batch: each start-up mark now moves it on, the last one into step 1."""
    events = tmp_path / "events.jsonl"
    console = Console(events=events, clock=lambda: 42.0)
    said = []
    for row in (
        '{"t": 1, "phase": "start", "process": "worker"}',
        '{"t": 2, "phase": "startup", "mark": "model loaded", "seconds": 3.0}',
        '{"t": 3, "phase": "startup", "mark": "vLLM engine starting"}\n'
        '{"t": 3.5, "phase": "import", "module": "vllm"}',
        '{"t": 4, "phase": "startup", "mark": "trainer ready", "seconds": 9.0}',
    ):
        with events.open("a") as f:
            f.write(row + "\n")
        said.append(console.heartbeat())
    # once the trainer is ready, HF's training loop starts step 1 with the first batch's generation
    assert all(line.startswith("before the first step: ") for line in said[:-1]), said
    assert said[-1].startswith("step 1: ")
    assert [line.split(": ", 1)[1].split(",")[0] for line in said] == [
        "importing the libraries and loading the model",
        "loading the dataset and setting up the trainer",
        "starting vLLM (weights",
        "generating the first completions",
    ]


def test_after_a_generation_round_the_heartbeat_says_training(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"t": 1, "phase": "generate", "seconds": 12.7, "step": 0, "completions": 8}\n')
    assert (
        Console(events=events, clock=lambda: 0.0)
        .heartbeat()
        .startswith("step 1: training on 8 completions (generated in 13 s)")
    )
    assert "logs/trainer.log" in Console(clock=lambda: 0.0).heartbeat()


def test_seconds_per_step_agree_with_elapsed_time():
    """ms-swift's train_speed counts from the trainer's set-up (vLLM's engine start included): on the lent
    H200 step 1 of 3 logged train_speed 0.0097 iter/s with elapsed_time 5s. The line says 5.0 s/step."""
    row = (
        "{'loss': 0.0, 'reward': 0.775, 'reward_std': 0.027, 'global_step/max_steps': '1/3', "
        "'elapsed_time': '5s', 'remaining_time': '10s', 'train_speed(iter/s)': 0.0097}"
    )
    (line,) = shown(Console(), [row])
    assert line == "step 1/3 | reward 0.775 (std 0.027) | 5.0 s/step | elapsed 5s | ETA after step 2"
    later = row.replace("'1/3'", "'2/3'").replace("'5s'", "'1m 4s'")
    assert "32.0 s/step | elapsed 1m 4s" in shown(Console(), [later])[0]  # no earlier line: the average
    # after step 1's line, step 2's own time: a slow step shows as slow (a new user read 124 s/step
    # averaged for a step that took 227 s)
    console = Console()
    shown(console, [row])
    assert "59.0 s/step | elapsed 1m 4s" in shown(console, [later])[0]


def test_evaluate_progress_has_an_eta_and_a_heartbeat_between_batches():
    """`evaluate` ran 16 minutes with four lines and no ETA: a line per batch with the ETA of
    both models' prompts (model loading not counted in the pace), a heartbeat while a batch runs."""
    now = [0.0]
    progress = Progress(24, clock=lambda: now[0])  # 12 prompts, base model then adapter
    progress.now("base model: loading the model")
    now[0] = 20.0
    progress.now("base model: answering prompts 1-8 of 12", timed=True)
    now[0] = 25.0
    assert progress.due() is None  # quiet for less than HEARTBEAT_SECONDS
    now[0] = 60.0
    assert progress.due() == (
        "base model: answering prompts 1-8 of 12, 40 s so far | elapsed 1m 0s | ETA after the first batch"
    )
    now[0] = 120.0  # 8 prompts in 100 s of generation: 12.5 s a prompt, 16 to go
    assert progress.advance(8, "base model: 8 of 12 prompts answered") == (
        "base model: 8 of 12 prompts answered | elapsed 2m 0s | ETA 3m 20s"
    )
    progress.now("adapter: loading the model")
    now[0] = 300.0  # a slow load does not change the pace
    progress.now("adapter: answering prompts 1-8 of 12", timed=True)
    now[0] = 400.0  # 16 prompts in 200 s of generation, 8 to go
    assert progress.advance(8, "adapter: 8 of 12 prompts answered").endswith("| ETA 1m 40s")


def test_after_step_1_the_heartbeat_says_the_trainer_generates_and_milestones_show_once(tmp_path):
    """A new user's first run saw "step 2/4: setting up the trainer" for a minute: the last event
    was the "first step logged" mark, which the trainer writes after step 1's line. And ms-swift's "Loading
    the model using model_dir" came twice."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"t": 1, "phase": "startup", "mark": "first step logged", "seconds": 0.1}\n')
    console = Console(events=events, clock=lambda: 0.0, total_steps=4)
    shown(console, [next(ln for ln in LOG if "'global_step/max_steps': '1/4'" in ln)])
    assert console.heartbeat().startswith("step 2/4: generating completions")
    loading = "[INFO:swift] Loading the model using model_dir: /models/SmolLM2-135M-Instruct"
    assert shown(Console(), [loading, loading]) == [loading.split("] ", 1)[1]]


def test_a_child_hook_that_did_not_install_shows_once_per_hook_whichever_process_said_it():
    """Every process and rank that imports the patched library prints the hook's notice (its log keeps
    them all); the console shows each hook's once, and still every other failure."""
    notice = (
        "grpo-rig hook top_k_first not installed: vllm.v1.sample.ops.topk_topp_sampler has no "
        "apply_top_k_top_p; the run goes on without it (DISABLE_HOOKS=top_k_first turns it off)"
    )
    other = notice.replace("top_k_first", "lean")
    console = Console()
    out = [
        console.shown("trainer", notice),
        console.shown("trainer", f"[rank1]: {notice}"),
        console.shown("rollout", notice),
        console.shown("trainer", f"[rank1]: {other}"),
    ]
    assert out == [notice, None, None, other]


def step_line(step: int, total: int, at: float) -> str:
    return f"{{'loss': 0.1, 'global_step/max_steps': '{step}/{total}', 'elapsed_time': '{at}s'}}"


def test_the_automatic_stall_bound_is_ten_longest_waits_and_watches_after_the_last_step():
    """10 x the longest wait between two signs of progress, at least 600 s; after the last step the final save
    and the exit are watched too (a hang there waited forever, its heartbeat counting "step 11/10")."""
    now = [0.0]
    console = Console(clock=lambda: now[0], total_steps=10)
    assert console.stalled() == ""  # the start-up: model downloads, compilation
    for step, at in ((1, 100.0), (2, 130.0), (3, 150.0)):  # steps of 30 s and 20 s
        now[0] = at
        console.shown("trainer", step_line(step, 10, at))
    now[0] = 150.0 + 599
    assert console.stalled() == ""  # 10 x 30 s is below the 600 s floor
    now[0] = 150.0 + 601
    said = console.stalled()
    assert (
        said.startswith("stalled: step 4/10")
        and "10 x the longest wait between two signs of progress (30 s), at least 600 s" in said
    ), said
    now[0] = 0.0
    console = Console(clock=lambda: now[0], total_steps=10)
    for step, at in ((9, 100.0), (10, 130.0)):
        now[0] = at
        console.shown("trainer", step_line(step, 10, at))
    now[0] += 599
    assert console.stalled() == ""
    now[0] += 2
    said = console.stalled()
    assert said.startswith("stalled: step 10/10 done: saving the final checkpoint and exiting"), said
    assert "11/10" not in console.heartbeat()


def test_step_1_counts_towards_the_bound_so_a_slow_machine_is_not_called_stalled(tmp_path):
    """`make smoke` on a busy 2-core machine was ended 600 s after a step 1 of 979 s: step 1 was left out of
    "the longest step". It counts: the next step may take as long."""
    events = tmp_path / "events.jsonl"
    now = [0.0]
    console = Console(clock=lambda: now[0], wall=lambda: 1000.0, events=events, total_steps=3)
    events.write_text('{"t": 1100.0, "phase": "startup", "mark": "trainer ready"}\n')
    now[0] = 100.0 + 979
    console.shown("trainer", step_line(1, 3, 979.0))
    now[0] += 9789
    assert console.stalled() == ""
    now[0] += 2
    assert "(979 s)" in console.stalled()


def test_logging_every_ten_steps_at_70_s_a_step_is_not_stalled(tmp_path):
    """The tcm-4x4090 recipe logs every 10 steps: the watch counts each step's phase events, not the lines;
    without the events (DISABLE_HOOKS=events) the plan's step x LOGGING_STEPS and the first line's wait."""
    events = tmp_path / "events.jsonl"
    now = [0.0]
    console = Console(clock=lambda: now[0], wall=lambda: 0.0, events=events, total_steps=30, logging_steps=10)
    events.write_text('{"t": 60.0, "phase": "startup", "mark": "trainer ready"}\n')
    for step in range(1, 31):
        for tick in range(7):  # the heartbeat's and the supervisor's ticks inside the step
            now[0] = 60.0 + (step - 1) * 70 + tick * 10
            assert console.stalled() == "", (step, tick)
        now[0] = 60.0 + step * 70
        with events.open("a") as f:
            f.write(f'{{"t": {now[0] - 5}, "phase": "rollout", "seconds": 60, "step": {step - 1}}}\n')
            f.write(f'{{"t": {now[0]}, "phase": "train", "seconds": 5, "step": {step - 1}}}\n')
        if step % 10 == 0:
            console.shown("trainer", step_line(step, 30, step * 70.0))
    now = [0.0]
    lines_only = Console(clock=lambda: now[0], total_steps=30, logging_steps=10, predicted_step=70.0)
    for step in (10, 20, 30):
        for tick in range(0, 700, 50):
            now[0] = 60.0 + (step - 10) * 70 + tick
            assert lines_only.stalled() == "", (step, tick)
        now[0] = 60.0 + step * 70
        lines_only.shown("trainer", step_line(step, 30, step * 70.0))


def test_an_earlier_attempts_events_are_not_this_attempts(tmp_path):
    """A completed run resumed an hour later with a larger MAX_STEPS was ended at once ("no step for 1475 s"):
    the watch counted from the first attempt's "trainer ready". Each attempt's rows follow its entrypoint's
    start row; only the last attempt's count."""
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"t": 1000.0, "phase": "start", "process": "entrypoint"}\n'
        '{"t": 1100.0, "phase": "startup", "mark": "trainer ready"}\n'
        '{"t": 1200.0, "phase": "train", "seconds": 5, "step": 1}\n'
        '{"t": 4600.0, "phase": "start", "process": "entrypoint"}\n'
    )
    now = [0.0]
    console = Console(clock=lambda: now[0], wall=lambda: 4610.0, events=events, total_steps=3)
    now[0] = 30.0
    assert console.stalled() == "" and console.heartbeat().startswith("before the first step")
    with events.open("a") as f:
        f.write('{"t": 4640.0, "phase": "startup", "mark": "trainer ready"}\n')
    now[0] = 40.0
    assert console.stalled() == "" and console.heartbeat().startswith("step 1/3: generating the first")
    resumed = Console(clock=lambda: now[0], wall=lambda: 4610.0, events=events, total_steps=3, resumed_at=2)
    assert resumed.heartbeat().startswith("step 3/3: generating the first"), resumed.heartbeat()


def test_a_checkpoint_save_is_named_and_bytes_written_are_progress(tmp_path):
    """A stall during a save was described as "generating completions"; a save of many GiB may outlast 10
    steps, and the bytes it writes say it is alive."""
    now = [0.0]
    written = [0]
    console = Console(clock=lambda: now[0], total_steps=5, probe=lambda: written[0])
    now[0] = 100.0
    console.shown("trainer", step_line(1, 5, 100.0))
    now[0] = 130.0
    console.shown("trainer", "[INFO:swift] Saving model checkpoint to /out/r/train/checkpoint-1")
    now[0] = 160.0
    assert console.heartbeat().startswith("step 2/5: saving a checkpoint"), console.heartbeat()
    events = tmp_path / "events.jsonl"
    saved = Console(clock=lambda: now[0], wall=lambda: now[0], total_steps=5, events=events)
    saved.shown("trainer", "[INFO:swift] Saving model checkpoint to /out/r/train/checkpoint-1")
    now[0] += 1
    events.write_text(f'{{"t": {now[0]}, "phase": "save", "seconds": 3.0, "step": 1}}\n')
    assert "generating completions" in saved.heartbeat(), saved.heartbeat()  # the save ended
    for _ in range(100):  # 1,000 s of a save that keeps writing
        now[0] += 10.0
        written[0] += 1
        assert console.stalled() == ""
    now[0] += 601
    assert console.stalled().startswith("stalled: step 2/5: saving a checkpoint")


def test_the_first_step_is_watched_from_trainer_ready_for_ten_start_ups_and_a_slow_plan_widens_the_bound(
    tmp_path,
):
    """Before step 1 nothing was bounded: a reward that never returned at step 1 waited forever. Now the first
    step is watched from the trainer's "trainer ready" mark (a download before it has no knowable length),
    for 10 x the start-up (at least 600 s); STALL_TIMEOUT applies there too. A plan whose predicted step is
    long widens the bound after step 1."""
    events = tmp_path / "events.jsonl"
    now = [0.0]
    console = Console(clock=lambda: now[0], wall=lambda: 1000.0, events=events, total_steps=5)
    now[0] = 5000.0
    assert console.stalled() == ""  # downloading, loading, starting vLLM: no mark yet
    events.write_text('{"t": 1100.0, "phase": "startup", "mark": "trainer ready"}\n')  # 100 s after the start
    now[0] = 100.0 + 999
    assert console.stalled() == ""
    now[0] = 100.0 + 1001
    said = console.stalled()
    assert said.startswith("stalled: step 1/5") and "10 x the start-up (100 s), at least 600 s" in said, said
    now[0] = 0.0
    strict = Console(clock=lambda: now[0], wall=lambda: 1000.0, events=events, stall_seconds=20)
    now[0] = 119.0
    assert strict.stalled() == ""
    now[0] = 121.0
    assert "STALL_TIMEOUT=20" in strict.stalled()
    slow = Console(clock=lambda: now[0], predicted_step=90.0, total_steps=5)
    for step, at in ((1, 200.0), (2, 230.0)):
        now[0] = at
        slow.shown("trainer", step_line(step, 5, at))
    now[0] = 230.0 + 899
    assert slow.stalled() == ""  # 10 x the predicted 90 s, not the 600 s floor
    now[0] = 230.0 + 901
    assert "10 x the plan's predicted step (90 s)" in slow.stalled()


def test_the_step_line_shows_kl_and_completion_length_beside_the_reward():
    """Users' trial: the step line showed the reward only; KL and completion length were in the PNG and
    logging.jsonl. They come from the same row ms-swift logs."""
    row = (
        "{'loss': 0.0, 'reward': 0.5, 'reward_std': 0.1, 'kl': 0.00123, 'completions/mean_length': 268.94, "
        "'global_step/max_steps': '1/3', 'elapsed_time': '5s'}"
    )
    (line,) = shown(Console(), [row])
    assert line.startswith(
        "step 1/3 | reward 0.500 (std 0.100) | kl 0.0012 | completion 269 tokens | 5.0 s/step"
    )


def test_a_resumed_attempt_s_first_step_is_timed_from_its_own_start():
    """New-user trial: train longer from checkpoint-4; the first line of the new attempt read '4.0 s/step |
    elapsed 20s | ETA 4s' (20 s over all five steps, ms-swift's ETA from it) where step 5 took 20 s."""
    row = (
        "{'loss': 0.0, 'reward': 0.5, 'reward_std': 0.1, 'global_step/max_steps': '5/6', "
        "'elapsed_time': '20s', 'remaining_time': '4s', 'train_speed(iter/s)': 0.25}"
    )
    (line,) = shown(Console(resumed_at=4), [row])
    assert line.endswith("| 20.0 s/step | elapsed 20s | ETA after step 6"), line
