"""What a person sees of the children: the console policy, in one place.

Every line of every child goes to `<run>/logs/<role>.log` (launch.Supervisor); the console gets only:

- one line per training step, made from ms-swift's per-step log dict: step/total, mean reward and its
  std, seconds per step, elapsed, and an ETA from the pace of the steps after the first line (step 1
  holds the warm-up);
- ms-swift's milestones (loading the model, where it logs, saving a checkpoint, the end of training) and
  the rollout server's start-up;
- anything that looks like a failure: warnings are not, errors are; a traceback is folded to its
  exception line, with one line saying the whole of it is in the role's log (a run that fails explains
  itself at the end: deaths.explain; seen on the cases re-run: 60 lines of torch's save traceback above
  the one-line "disk full" summary);
- a child hook that could not install ("grpo-rig hook NAME not installed: ...", entrypoint/child/wire.py),
  once per hook whichever processes and ranks said it;
- a heartbeat when the console has been quiet for HEARTBEAT_SECONDS, saying what the trainer is doing
  (loading, generating N completions, training), from the phase events the trainer's site hook writes
  (entrypoint/child/hooks/events.py, GRPO_RIG_EVENTS), naming the step as the step lines do ("step 2/4").

`Progress` does the same for work counted in units (evaluate's prompts): a line per batch with an ETA,
a heartbeat in between.

The model structure, the argument dump, tqdm's bars and library notices stay in the log.
CONSOLE=all (a recipe key, or in the environment) shows every line.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

from entrypoint.child import wire
from entrypoint.child.wire import GRPO_PHASES, NOT_INSTALLED
from entrypoint.supervise import stall
from entrypoint.supervise.deaths import TRACEBACK_START, in_traceback

HEARTBEAT_SECONDS = 30.0
MILESTONES = (
    "Loading the model using model_dir", "model_parameter_info", "The logging file will be saved",
    "Saving model checkpoint", "End time of running main", "last_model_checkpoint", "Downloading the model",
    "Uvicorn running", "Application startup complete", "Successfully imported external_plugins",
)  # fmt: skip
FAILURE = re.compile(
    r"Traceback|\b\w*(Error|Exception)\b:|out of memory|OutOfMemory|Killed|Segmentation fault|"
    r"ChildFailedError|\bFATAL\b|\bERROR\b|exitcode\s*:",
)


class Console:
    """Decides which child lines are shown (`shown`), what the heartbeat says (`heartbeat`) and feeds the
    stall watch (supervise/stall.py) with the signs of progress of this attempt: its phase events, its step
    lines, its checkpoint saves and (`probe`) the bytes written under the run's training directory."""

    def __init__(
        self,
        show_all: bool = False,
        events: Path | None = None,
        clock=time.monotonic,
        total_steps: int | None = None,
        stall_seconds: float = 0.0,
        predicted_step: float = 0.0,
        wall=time.time,
        logging_steps: int = 1,
        probe=None,
        resumed_at: int = 0,
    ):
        self.show_all, self.clock = show_all, clock
        self.events = EventTail(events)
        self.predicted_step = predicted_step  # the plan's step seconds (Plan.step_seconds), 0 unknown
        self.logging_steps = max(1, logging_steps)  # a step line every LOGGING_STEPS steps
        self.stall_seconds, self.probe = stall_seconds, probe
        self.resumed_at = resumed_at  # the step of the checkpoint a resumed attempt starts from
        self.watch = self._new_watch()
        self.wall_started = wall()  # the events' clock (time.time) when this console started
        self.started = clock()
        self.folding: set[str] = set()  # roles inside a traceback: its frames stay in the log
        self.folded: set[str] = set()  # roles whose console already said where their tracebacks are
        self.milestone: dict[str, str] = {}  # the last milestone shown, per role
        self.step: tuple[int, int] | None = None  # (done, total)
        # MAX_STEPS when the plan knows it; the step lines say it otherwise
        self.total = total_steps if total_steps and total_steps > 0 else None
        self.step_at = self.started
        self.step_elapsed = 0.0  # ms-swift's elapsed_time at the last step line, seconds
        self.first: tuple[int, float] | None = None  # (step, elapsed s) of the first step line
        self.hooks_said: set[str] = set()  # child hooks whose not-installed line was shown
        self.last_event: dict | None = None  # the newest row saying where the trainer is
        self.last_event_at = self.started
        self.activity: tuple[float, str] | None = None  # (when, what) the trainer's log said it does

    def shown(self, role: str, line: str) -> str | None:
        """The console text for a child's line, or None to keep it to the log."""
        if self.show_all:
            return line
        line = line.rsplit("\r", 1)[-1]  # tqdm redraws with \r: its last frame
        hook = NOT_INSTALLED.search(line)
        if hook:  # every process and rank of every role says it: once per hook
            if hook["hook"] in self.hooks_said:
                return None
            self.hooks_said.add(hook["hook"])
            return line[hook.start() :]
        if role in self.folding:
            if in_traceback(line):
                return None
            self.folding.discard(role)  # the first unindented line: the exception itself
            return line
        if "'global_step/max_steps'" in line and "{'" in line:  # may follow a tqdm frame on the same line
            return self._step_line(line[line.index("{'") :])
        if TRACEBACK_START in line:
            self.folding.add(role)
            if role in self.folded:
                return None
            self.folded.add(role)
            return f"a traceback (its frames go to logs/{role}.log; CONSOLE=all shows them here):"
        if FAILURE.search(line) and "FutureWarning" not in line and "UserWarning" not in line:
            return line
        if any(m in line for m in MILESTONES):
            text = line.rsplit("[INFO:swift] ", 1)[-1] if "[INFO:swift]" in line else line
            self._activity(text)
            # ms-swift logs "Loading the model using model_dir" twice in a row: once on the console
            seen, self.milestone[role] = self.milestone.get(role), text
            return None if text == seen else text
        return None

    def _step_line(self, line: str) -> str | None:
        try:
            row = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError):
            return line
        if "train_runtime" in row:  # HF's end-of-training summary
            return (
                f"training finished in {row['train_runtime'] / 60:.1f} min "
                f"({row.get('global_step/max_steps', '?')} steps)"
            )
        done, total = (int(x) for x in str(row["global_step/max_steps"]).split("/"))
        now = self.clock()
        # The time of the steps since the last line, from ms-swift's elapsed_time like the ETA beside it:
        # its train_speed(iter/s) counts from the trainer's set-up (vLLM's engine start included), so step 1
        # read 103 s/step after 5 s of training; and an average hides the slow step a user asks about.
        elapsed = _seconds(row.get("elapsed_time"))
        # a resumed attempt's elapsed_time counts from its own start, after the checkpoint's steps
        before, before_elapsed = (self.step[0], self.step_elapsed) if self.step else (self.resumed_at, 0.0)
        speed = row.get("train_speed(iter/s)")
        if elapsed is not None and done > before:
            per_step = (elapsed - before_elapsed) / (done - before)
        elif speed:
            per_step = 1 / speed
        else:
            per_step = (now - self.step_at) / max(1, done - before)
        self.step_elapsed = elapsed or 0.0
        self._read_events()  # a "trainer ready" not read yet arms the watch before this step's sign
        self.watch.progress(now)
        self.step, self.step_at, self.total = (done, total), now, total
        reward = row.get("reward")
        parts = [f"step {done}/{total}"]
        if reward is not None:
            parts.append(f"reward {reward:.3f} (std {row.get('reward_std', 0.0):.3f})")
        # how far the policy moved from the reference, and how long its completions run (tokens, mean)
        if isinstance(row.get("kl"), int | float):
            parts.append(f"kl {row['kl']:.4f}")
        if isinstance(row.get("completions/mean_length"), int | float):
            parts.append(f"completion {row['completions/mean_length']:.0f} tokens")
        parts.append(f"{per_step:.1f} s/step")
        parts.append(f"elapsed {row.get('elapsed_time', '?')}")
        parts.append(self._eta(done, total, elapsed, row.get("remaining_time")))
        return " | ".join(parts)

    def _eta(self, done: int, total: int, elapsed: float | None, remaining: object) -> str:
        """The time left at the pace of the steps after the first step line. Step 1 (of a resumed attempt:
        the step after its checkpoint) holds the warm-up (the first generation, allocator and kernel caches):
        ms-swift's remaining_time extrapolates from it (a new user read "13 min" after step 1). After it the
        line says when an ETA comes."""
        if elapsed is None:
            return f"ETA {remaining or '?'}"
        if self.first is None or done <= self.first[0]:
            self.first = (done, elapsed)
            # a first line after several steps (LOGGING_STEPS > 1) averages step 1 in: ms-swift's figure
            if done == self.resumed_at + 1 and total > done:
                return f"ETA after step {done + 1}"
            return f"ETA {remaining or '?'}"
        pace = (elapsed - self.first[1]) / (done - self.first[0])
        return f"ETA {format_seconds(pace * max(0, total - done))}"

    def _activity(self, milestone: str) -> None:
        """What a milestone line of the trainer's log says it is doing now (a save is a sign of progress)."""
        doing = next((d for m, d in ACTIVITIES if m in milestone), None)
        if doing is not None:
            now = self.clock()
            self.activity = (now, doing)
            self.watch.progress(now)

    def _new_watch(self) -> stall.StallWatch:
        return stall.StallWatch(
            self.clock, self.stall_seconds, self.predicted_step * self.logging_steps, self.probe
        )

    def _read_events(self) -> None:
        """Take the new event rows: "trainer ready" arms the stall watch, every row after it is a sign of
        progress, and the newest that says where the trainer is feeds the heartbeat. Only this attempt's rows
        count: a resumed run's file holds every attempt's, each after its entrypoint's start row
        (commands/train.py prepare; startup.marks cuts the file alike)."""
        for row in self.events.new_rows():
            if wire.attempt_start(row):
                self.watch, self.last_event, self.last_event_at = self._new_watch(), None, self.started
                continue
            t = row.get("t")
            at = self.started + (float(t) - self.wall_started) if isinstance(t, int | float) else self.clock()
            at = min(at, self.clock())
            if row.get("phase") == wire.STARTUP and row.get("mark") in FIRST_STEP_MARKS:
                self.watch.arm(at)
            elif self.watch.armed:
                self.watch.progress(at)
            if row.get("phase") in GRPO_PHASES:  # step-level events flow: a sign per phase, not per line
                self.watch.predicted = self.predicted_step
            if row.get("phase") != wire.IMPORT or self.last_event is None:
                self.last_event, self.last_event_at = row, at

    def stalled(self) -> str:
        """Why the run counts as stalled ('' while it does not): no sign of progress for the stall watch's
        bound (supervise/stall.py says what counts and how long). Every phase is watched from "trainer ready"
        (or the first step line) to the trainer's exit: the steps, the checkpoint saves, the final save."""
        self._read_events()
        verdict = self.watch.stalled()
        if verdict is None:
            return ""
        waited, rule = verdict
        doing = self.heartbeat().split(" (full output")[0]
        return (
            f"stalled: {doing}, with no sign of progress for {waited:.0f} s ({rule}); the usual causes: a "
            "reward function that never returns, a weight sync or NCCL collective that hangs, a hang at "
            "exit; where it waits: the stacks of its threads at the stall are in logs/stacks/ (the training "
            "process's main thread below: a reward function is named by its file and name); raise "
            "STALL_TIMEOUT if this can truly take this long"
        )

    def heartbeat(self) -> str:
        """What the trainer is doing now, from the newest of its last event (start-up marks, then GRPO phases)
        and its last milestone (a checkpoint save, the end of training), with the step named as the step
        lines name it ("step 2/4"); after the last step, "step 4/4 done"."""
        self._read_events()
        waited = self.clock() - (self.step_at if self.step else self.started)
        last = self.last_event or {}
        phase = last.get("phase")
        since = "into this step" if self.step else "since the start"
        if self.step:
            number: int | None = self.step[0] + 1
        elif phase in GRPO_PHASES:
            number = int(last.get("step") or 0) + 1
        elif phase == wire.STARTUP and last.get("mark") in FIRST_STEP_MARKS:
            number = self.resumed_at + 1
        else:
            number = None
        if number and self.total and number > self.total:  # the last step is done: saving, exiting
            where, since = f"step {self.total}/{self.total} done", "since it"
        elif number:
            where = f"step {number}" + (f"/{self.total}" if self.total else "")
        else:
            where = "before the first step"
        if self.activity is not None and self.activity[0] >= self.last_event_at:
            doing = self.activity[1]
        elif phase == wire.SAVE:  # a step's checkpoint is written: the next step's generation follows
            doing = "generating completions"
        elif phase in GRPO_PHASES:
            if phase in (wire.GENERATE, wire.ROLLOUT):
                doing = (
                    f"training on {last.get('completions', '?')} completions (generated in "
                    f"{last.get('seconds', 0):.0f} s)"
                )
            else:
                doing = "generating completions"
        elif phase == wire.STARTUP:
            doing = AFTER_MARK.get(last.get("mark"), "setting up the trainer")
        elif phase in (wire.START, wire.IMPORT):
            doing = "importing the libraries and loading the model"
        else:
            doing = "working" if self.step else "loading the model and the data"
        if where.endswith("done") and doing in ("generating completions", "working"):
            doing = "saving the final checkpoint and exiting"
        return f"{where}: {doing}, {waited:.0f} s {since} (full output: logs/trainer.log)"


class Progress:
    """Lines for work counted in units (evaluate: prompts answered by both models): one per batch with the
    time elapsed and an ETA, and a heartbeat (`due`) when quiet for HEARTBEAT_SECONDS. The ETA is the pace of
    the timed work so far (loading a model is not timed), so it comes after the first batch."""

    def __init__(self, total: int, clock=time.monotonic):
        self.total, self.clock = total, clock
        self.started = self.said = self.since = clock()
        self.done = 0
        self.busy = 0.0  # seconds of timed work
        self.doing, self.timed = "starting", False

    def now(self, doing: str, timed: bool = False) -> None:
        """What is being done from now on; `timed`: work that counts towards the units (a batch)."""
        self.doing, self.since, self.timed = doing, self.clock(), timed

    def advance(self, units: int, what: str) -> str:
        """The line for `units` more done, `what` saying which
        (e.g. "base model: 8 of 12 prompts answered")."""
        now = self.clock()
        if self.timed:
            self.busy += now - self.since
        self.done += units
        self.timed, self.said = False, now
        return f"{what} | elapsed {format_seconds(now - self.started)} | {self.eta()}"

    def eta(self) -> str:
        if not self.done or self.busy <= 0:
            return "ETA after the first batch"
        return f"ETA {format_seconds(self.busy / self.done * max(0, self.total - self.done))}"

    def due(self) -> str | None:
        """A heartbeat line when nothing was said for HEARTBEAT_SECONDS, else None."""
        now = self.clock()
        if now - self.said < HEARTBEAT_SECONDS:
            return None
        self.said = now
        return (
            f"{self.doing}, {now - self.since:.0f} s so far | elapsed {format_seconds(now - self.started)} | "
            f"{self.eta()}"
        )


# what the trainer does after each start-up mark (entrypoint/child/hooks/events.py writes them)
AFTER_MARK = {
    wire.MODEL_LOADED: "loading the dataset and setting up the trainer",
    wire.DATASET_READY: "setting up LoRA and the trainer",
    wire.VLLM_STARTING: "starting vLLM (weights, torch.compile, KV cache, CUDA graphs)",
    wire.VLLM_READY: "finishing the trainer's set-up",
    wire.TRAINER_READY: "generating the first completions",
    # written after step 1's line, before step 2's generation
    wire.FIRST_STEP_LOGGED: "generating completions",
}
# after these marks the trainer is inside step 1 (HF Trainer.train: the first batch's generation)
FIRST_STEP_MARKS = (wire.TRAINER_READY,)
# what the trainer does after a milestone of its log (transformers 4.51.3 Trainer._save logs the first as a
# save begins; ms-swift 3.6.4 logs the second after train() returned and the final state was saved)
ACTIVITIES = (
    ("Saving model checkpoint", "saving a checkpoint"),
    ("End time of running main", "exiting after training"),
)


class EventTail:
    """The events file's rows, each once: `new_rows` gives those appended since its last call. A line still
    being written waits for its end; a line cut short by a crash is skipped."""

    def __init__(self, path: Path | None):
        self.path = path
        self.offset = 0
        self.partial = b""

    def new_rows(self) -> list[dict]:
        if self.path is None:
            return []
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        rows = []
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:  # a row cut short by a crash
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows


def format_seconds(seconds: float) -> str:
    """Seconds as ms-swift writes a duration ("5s", "1m 43s", "2h 3m 4s"; swift/utils format_time), so the
    ETA reads like the elapsed time beside it."""
    whole = int(round(seconds))
    hours, minutes, secs = whole // 3600, whole % 3600 // 60, whole % 60
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _seconds(text: object) -> float | None:
    """ms-swift's duration text ("5s", "1m 43s", "2h 3m 4s"; swift/utils format_time) in seconds."""
    if not isinstance(text, str):
        return None
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    total = 0.0
    for part in text.split():
        number, unit = part[:-1], part[-1:]
        try:
            total += float(number) * units[unit]
        except (ValueError, KeyError):
            return None
    return total if text.split() else None
