"""The hooks the plan installs in its children (entrypoint/child/hooks/, installed by
entrypoint/child/site/sitecustomize.py), on stand-ins for the libraries they patch: the real ones need a GPU
(tests/gpu runs them for real). tests/child/test_hooks.py checks their declarations against the stack."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from entrypoint.child import final_only, heap_freeze, runtime
from entrypoint.child.hooks import (
    adapter_sync,
    emulate_vram,
    events,
    graphs_up_to_max_seqs,
    inspect_here,
    keep_pools,
    liger_eager,
    offload_before_wake,
    offload_quant_states,
    reward_check,
    scheduler_steps,
    top_k_first,
)
from tests.conftest import ROOT, clean_env

SITE = ROOT / "entrypoint" / "child" / "site"
GIB = 1024**3


@pytest.mark.parametrize(
    ("free", "total", "used", "expected"),
    [
        # an H200 (140 GiB) this process uses 3 GiB of, emulating 24 GiB: 21 free of 24
        (137 * GIB, 140 * GIB, 3 * GIB, (21 * GIB, 24 * GIB)),
        # other processes fill the real device: never more free than there really is
        (10 * GIB, 140 * GIB, 3 * GIB, (10 * GIB, 24 * GIB)),
        # over the emulated card: nothing free, not a negative number
        (100 * GIB, 140 * GIB, 30 * GIB, (0, 24 * GIB)),
        # a card smaller than the emulation is itself
        (20 * GIB, 22 * GIB, 2 * GIB, (20 * GIB, 22 * GIB)),
    ],
)
def test_emulated_card_as_vllm_reads_it(free, total, used, expected):
    assert emulate_vram.emulated_mem_info(free, total, used, 24 * GIB) == expected


@pytest.mark.parametrize(
    ("free", "total", "expected"),
    [
        # an idle H200 emulating 24 GiB: torch's allocator is capped at 24 GiB of its 140
        (139 * GIB, 140 * GIB, 24 / 140),
        # a ballast holds all but 24 GiB (23.5 free once this context exists): the card itself is the limit,
        # and vLLM's sleeping pool is not counted as allocated
        (int(23.5 * GIB), 140 * GIB, None),
        (24 * GIB, 140 * GIB, None),
        # a real card smaller than the emulation: nothing to cap
        (20 * GIB, 22 * GIB, None),
    ],
)
def test_the_allocator_is_capped_only_where_the_card_has_more_free_than_the_emulated_one(
    free, total, expected
):
    assert emulate_vram.cap_fraction(free, total, 24 * GIB) == expected


def test_the_emulated_card_counts_this_process_s_own_use_from_nvml(monkeypatch):
    """NVML (the module torch.cuda imported) lists every process on the GPU: the emulated card subtracts
    this process's share only; without NVML in torch the caller falls back to torch's reserved memory."""
    mine = types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * GIB)
    other = types.SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=9 * GIB)
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        nvmlDeviceGetComputeRunningProcesses=lambda handle: [other, mine],
    )
    props = types.SimpleNamespace(uuid="0f3c")
    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(pynvml=nvml, get_device_properties=lambda i: props)
    )
    for ready, expected in ((None, 3 * GIB), (False, None)):
        monkeypatch.setattr(emulate_vram._Nvml, "ready", ready)
        monkeypatch.setattr(emulate_vram._Nvml, "handles", {})
        assert emulate_vram._Nvml.own_use(torch, 0) == expected
    monkeypatch.setattr(emulate_vram._Nvml, "ready", None)
    assert emulate_vram._Nvml.own_use(types.SimpleNamespace(cuda=types.SimpleNamespace()), 0) is None


def _pools_alive_after_use(cumem_module_patch) -> list[bool]:
    """Use a stand-in of vLLM's pool context once, drop every reference, collect: which objects live on?"""
    import gc
    import weakref

    class MemPool:
        pass

    class CUDAPluggableAllocator:
        pass

    @contextlib.contextmanager
    def use_memory_pool_with_allocator(malloc, free):
        yield MemPool(), CUDAPluggableAllocator()

    cumem = types.SimpleNamespace(use_memory_pool_with_allocator=use_memory_pool_with_allocator)
    cumem_module_patch(cumem)
    with cumem.use_memory_pool_with_allocator(None, None) as data:
        refs = [weakref.ref(obj) for obj in data]
    del data
    gc.collect()
    return [r() is not None for r in refs]


@pytest.mark.cli
def test_vllm_pools_are_never_collected():
    assert _pools_alive_after_use(keep_pools._keep_vllm_pools) == [True, True]
    assert _pools_alive_after_use(lambda cumem: None) == [False, False]  # without the hook they would be


def test_phase_events_time_generation_and_training(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("RANK", "0")

    class GRPOTrainer:
        state = types.SimpleNamespace(global_step=3)

        def _move_model_to_vllm(self):
            pass

        def _generate_completions(self, inputs):
            return inputs

        def _generate_and_score_completions(self, inputs):
            return self._generate_completions(inputs)

        def training_step(self, model, inputs, num_items_in_batch=None):
            return 0.0

        def __init__(self):
            self.engine = self.prepare_vllm(None)

        def prepare_vllm(self, model):
            return "engine"

        def log(self, logs, start_time=None):
            pass

        def _save_checkpoint(self, model, trial):
            pass

    events._record_phases(types.SimpleNamespace(GRPOTrainer=GRPOTrainer), runtime.Events(str(path)))
    trainer = GRPOTrainer()
    trainer._generate_and_score_completions(["a", "b", "c", "d"])
    trainer.training_step(None, None)
    trainer.log({})
    trainer.log({})
    trainer._save_checkpoint(None, None)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert trainer.engine == "engine"
    assert [r.get("mark", r["phase"]) for r in rows] == [
        "vLLM engine starting",
        "vLLM engine ready",
        "trainer ready",
        "generate",
        "rollout",
        "train",
        "first step logged",
        "save",
    ]
    phases = [r for r in rows if r["phase"] != "startup"]
    assert phases[0]["completions"] == 4 and all(r["step"] == 3 and r["seconds"] >= 0 for r in phases)


def test_other_ranks_write_no_events(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")

    class GRPOTrainer:
        def training_step(self, *a):
            return 0.0

    events._record_phases(
        types.SimpleNamespace(GRPOTrainer=GRPOTrainer), runtime.Events(str(tmp_path / "events.jsonl"))
    )
    GRPOTrainer().training_step()
    assert not (tmp_path / "events.jsonl").exists()


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(PYTHONPATH=str(SITE), **env),
        capture_output=True,
        text=True,
    )


@pytest.mark.cli
def test_emulation_patches_torch_only_once_torch_is_imported():
    code = (
        "import sys; assert 'torch' not in sys.modules; import torch; "
        "print(torch.cuda.mem_get_info.__name__, hasattr(torch.cuda.mem_get_info, '__wrapped__'), "
        "len(torch.cuda._queued_calls))"
    )
    with_cap = _child(code, GRPO_RIG_EMULATE_VRAM_GB="24")
    without = _child(code)
    assert with_cap.returncode == 0, with_cap.stderr
    name, wrapped, queued = with_cap.stdout.split()
    assert (name, wrapped) == ("mem_get_info", "True")
    assert without.stdout.split()[1] == "False"
    assert int(queued) == int(without.stdout.split()[2]) + 1  # the memory-fraction cap, applied at CUDA init


def test_a_failing_hook_never_takes_the_child_down(tmp_path):
    pkg = tmp_path / "swift" / "trainers" / "rlhf_trainer"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "swift", tmp_path / "swift" / "trainers", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "grpo_trainer.py").write_text("X = 1\n")  # no GRPOTrainer: the hook fails
    proc = subprocess.run(
        [sys.executable, "-c", "import swift.trainers.rlhf_trainer.grpo_trainer as g; print(g.X)"],
        env=clean_env(PYTHONPATH=f"{SITE}:{tmp_path}", GRPO_RIG_EVENTS=str(tmp_path / "e.jsonl")),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr
    said = [line for line in proc.stderr.splitlines() if "not installed" in line]
    assert len(said) == 1 and said[0].startswith(
        "grpo-rig hook events not installed: swift.trainers.rlhf_trainer.grpo_trainer has no GRPOTrainer"
    ), proc.stderr


def test_another_sitecustomize_on_the_path_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins; builtins.OTHER_SITE_RAN = True\n")
    proc = subprocess.run(
        [sys.executable, "-c", "import builtins; print(getattr(builtins, 'OTHER_SITE_RAN', False))"],
        env=clean_env(PYTHONPATH=f"{SITE}:{tmp_path}"),
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == "True", proc.stderr


@pytest.mark.parametrize(
    ("max_num_seqs", "max_tokens", "sizes"),
    [
        (32, 2048, [1, 2, 4, 8, 16, 24, 32]),  # countdown-1x4090: 7 graphs instead of 67
        (33, 2048, [1, 2, 4, 8, 16, 24, 32, 40]),  # up to the first candidate >= max_num_seqs
        (3, 2048, [1, 2, 4]),
        (256, 2048, [1, 2, 4] + list(range(8, 257, 8))),  # vLLM's default max_num_seqs
        (1000, 2048, [1, 2, 4] + list(range(8, 513, 8))),  # never more than vLLM's own 67
        (32, 16, [1, 2, 4, 8, 16]),  # nor more tokens than a step holds
    ],
)
def test_cuda_graphs_only_for_batch_sizes_vllm_can_run(max_num_seqs, max_tokens, sizes):
    assert graphs_up_to_max_seqs.graph_sizes(max_num_seqs, max_tokens) == sizes


def _vllm_config(enforce_eager=False, sizes=None):
    """A stand-in for vllm.config as _set_cudagraph_sizes reads it (vllm 0.8.5.post1)."""

    class VllmConfig:
        def __init__(self):
            self.compilation_config = types.SimpleNamespace(
                cudagraph_capture_sizes=sizes,
                pass_config=types.SimpleNamespace(enable_sequence_parallelism=False),
            )
            self.scheduler_config = types.SimpleNamespace(max_num_seqs=32, max_num_batched_tokens=2048)
            self.model_config = types.SimpleNamespace(enforce_eager=enforce_eager)
            self.parallel_config = types.SimpleNamespace(tensor_parallel_size=1)

        def _set_cudagraph_sizes(self):  # vLLM's: keeps the sizes it is given, else its 67
            if self.compilation_config.cudagraph_capture_sizes is None:
                self.compilation_config.cudagraph_capture_sizes = [1, 2, 4] + list(range(8, 513, 8))

    return types.SimpleNamespace(VllmConfig=VllmConfig)


def test_the_graph_hook_sets_vllm_s_sizes_unless_the_recipe_or_eager_mode_decides():
    config = _vllm_config()
    graphs_up_to_max_seqs._graphs_up_to_max_seqs(config)
    c = config.VllmConfig()
    c._set_cudagraph_sizes()
    assert c.compilation_config.cudagraph_capture_sizes == [1, 2, 4, 8, 16, 24, 32]
    for kwargs, expected in (({"sizes": [1, 64]}, [1, 64]), ({"enforce_eager": True}, 67)):
        config = _vllm_config(**kwargs)
        graphs_up_to_max_seqs._graphs_up_to_max_seqs(config)
        c = config.VllmConfig()
        c._set_cudagraph_sizes()
        got = c.compilation_config.cudagraph_capture_sizes
        assert (len(got) if isinstance(expected, int) else got) == expected


# The reward check (GRPO_RIG_REWARD_CHECK) --------------------------------------------------------------


class StandInTrainer:
    """What the check reads of ms-swift 3.6.4's GRPOTrainer: reward_funcs, reward_func_names (set in
    __init__) and the way _score_completions calls each function: the completions, every column as a
    row-aligned list, and trainer_state."""

    def __init__(self, funcs):
        self.reward_funcs = list(funcs)
        self.reward_func_names = [f.__name__ for f in funcs]
        self.state = types.SimpleNamespace(global_step=3)

    def score(self, completions, **columns):
        return [f(completions, trainer_state=self.state, **columns) for f in self.reward_funcs]


def checked(*funcs):
    grpo = types.SimpleNamespace(GRPOTrainer=type("GRPOTrainer", (StandInTrainer,), {}))
    reward_check._check_rewards(grpo)
    return grpo.GRPOTrainer(funcs)


def exact(completions, solution, **kwargs):
    return [1.0 if c == s else 0.0 for c, s in zip(completions, solution, strict=True)]


COMPLETIONS, SOLUTIONS = ["4", "5", "six", "7"], ["4", "5", "6", "8"]


def test_rewards_that_answer_numbers_none_or_a_nan_beside_a_number_pass_unchanged():
    def partial(completions, **kwargs):  # None and NaN: "does not apply here", summed away by ms-swift
        return [None, float("nan"), 0.5, 1]

    trainer = checked(exact, partial)
    first, second = trainer.score(COMPLETIONS, solution=SOLUTIONS)
    assert first == [1.0, 1.0, 0.0, 0.0] and second[0] is None and second[2:] == [0.5, 1]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            lambda c, solution, **k: [1 / int(x) if x.isdigit() else int(x) for x in c],
            "reward function answer raised ValueError: invalid literal for int() with base 10: 'six' on row "
            "2 of the batch (completion 'six'; solution='6')",
        ),
        (lambda c, **k: [0.0] * 3, "reward function answer returned [0.0, 0.0, 0.0] for 4 completions"),
        (
            lambda c, **k: [0.0, "1.0", 0.0, 0.0],
            "reward function answer returned '1.0' for row 1 of the batch (completion '5'; solution='5'): "
            "it is not a number",
        ),
        (lambda c, **k: [0.0, 0.0, float("inf"), 0.0], "returned inf for row 2 of the batch"),
        (
            lambda c, **k: [0.0, float("nan"), 0.0, 0.0],
            "every reward function returned None or NaN for row 1 of the batch (completion '5'; "
            "solution='5') (answer: nan)",
        ),
    ],
)
def test_a_reward_answer_ms_swift_cannot_score_ends_the_run_naming_function_row_and_value(
    capsys, answer, said
):
    answer.__name__ = "answer"
    trainer = checked(answer)
    with pytest.raises(reward_check.RewardCheckFailed) as exc:
        trainer.score(COMPLETIONS, solution=SOLUTIONS)
    assert said in str(exc.value)
    assert (
        f"{reward_check.REWARD_MARK} {exc.value}" in capsys.readouterr().err
    )  # the line the entrypoint shows


def test_a_row_only_one_of_two_rewards_leaves_out_is_fine_but_none_from_both_ends_the_run():
    def half(completions, **kwargs):
        return [None, None, 0.0, 0.0]

    def other(completions, **kwargs):
        return [0.0, None, 0.0, 0.0]

    trainer = checked(half, other)
    with pytest.raises(reward_check.RewardCheckFailed, match=r"for row 1 .*\(half: None; other: None\)"):
        trainer.score(COMPLETIONS, solution=SOLUTIONS)


def test_the_reward_check_never_takes_a_trainer_down(capsys, monkeypatch):
    monkeypatch.setattr(runtime, "_SAID", set())
    grpo = types.SimpleNamespace(GRPOTrainer=type("GRPOTrainer", (), {"__init__": lambda self: None}))
    reward_check._check_rewards(grpo)
    grpo.GRPOTrainer()  # no reward_funcs at all: the check says so and stays out
    assert "grpo-rig hook reward_check not installed: once GRPOTrainer was built" in capsys.readouterr().err


REAL_SCORING = """
import math, sys, types
import torch
from transformers import TrainerState
from swift.trainers.rlhf_trainer.grpo_trainer import GRPOTrainer

def accuracy(completions, solution, **kwargs):
    return [1.0 if c == s else (math.nan if c == "?" else 0.0) for c, s in zip(completions, solution)]

trainer = GRPOTrainer.__new__(GRPOTrainer)  # what _score_completions reads of a trainer, without a model
trainer.reward_funcs, trainer.reward_func_names, trainer.reward_model_plugins = \
[accuracy], ["accuracy"], [None]
trainer.accelerator, trainer.reward_weights = types.SimpleNamespace(device="cpu"), torch.ones(1)
trainer.state, trainer.args = TrainerState(), types.SimpleNamespace(report_to=[])
rows = [{"messages": [{"role": "user", "content": "1+0?"}, {"role": "assistant", "content": c}], \
"solution": "1"}
        for c in ("1", "?", "0")]
try:  # ms-swift alone
    print("plain:", trainer._score_completions(rows))
except Exception as exc:
    print(f"plain: {type(exc).__name__}: {exc}")
from entrypoint.child.hooks import reward_check  # then with the check (importing the trainer is the minute)
reward_check._guard_rewards(trainer)
print(trainer._score_completions(rows))
"""


@pytest.mark.torch
@pytest.mark.slow  # imports ms-swift's GRPO trainer (~1 minute on 2 cores)
def test_ms_swift_s_own_scoring_of_a_nan_row_fails_unrelated_and_the_check_names_it(tmp_path):
    """On ms-swift 3.6.4's real GRPOTrainer._score_completions: a reward's NaN on a row crashes
    with "'TrainerState' object is not subscriptable"; with the check the run ends naming the row."""
    script = tmp_path / "score.py"
    script.write_text(REAL_SCORING)
    env = clean_env(PYTHONPATH=str(SITE))
    checked = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert "plain: TypeError: 'TrainerState' object is not subscriptable" in checked.stdout, checked.stderr
    assert checked.returncode == 1 and "TypeError" not in checked.stderr
    assert (
        "grpo-rig reward check: every reward function returned None or NaN for row 1 of the batch "
        "(completion '?'; solution='1') (accuracy: nan)"
    ) in checked.stderr


def test_vllm_inspects_the_model_class_in_place_only_once_cuda_is_up(monkeypatch):
    """GRPO_RIG_VLLM_INSPECT_HERE: the colocated trainer (CUDA initialised) reads the class's interfaces
    itself; a process without CUDA (the rollout server, `evaluate`) keeps vLLM's subprocess."""
    spawned = []

    class _ModelInfo:
        @staticmethod
        def from_model_cls(cls):
            return f"info of {cls.__name__}"

    class Qwen2ForCausalLM:
        pass

    class _LazyRegisteredModel:
        def load_model_cls(self):
            return Qwen2ForCausalLM

        def inspect_model_cls(self):  # vLLM's: a fresh interpreter (registry._run_in_subprocess)
            spawned.append(True)
            return "info from a subprocess"

    registry = types.SimpleNamespace(_LazyRegisteredModel=_LazyRegisteredModel, _ModelInfo=_ModelInfo)
    inspect_here._inspect_here_once_cuda_is_up(registry)
    cuda = types.SimpleNamespace(is_initialized=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert _LazyRegisteredModel().inspect_model_cls() == "info from a subprocess" and spawned == [True]
    cuda.is_initialized = lambda: True
    assert _LazyRegisteredModel().inspect_model_cls() == "info of Qwen2ForCausalLM" and spawned == [True]


def test_a_colocated_engine_builds_only_the_final_output_of_a_plain_request(monkeypatch):
    """GRPO_RIG_VLLM_LEAN: ms-swift's colocate generation reads only finished outputs, so a request with n=1
    and no logprobs asks vLLM for FINAL_ONLY; one that streams deltas, samples n>1 or wants logprobs keeps
    what it asked for."""
    import enum

    class RequestOutputKind(enum.Enum):
        CUMULATIVE = 0
        DELTA = 1
        FINAL_ONLY = 2

    class SamplingParams:
        def __init__(self, n=1, logprobs=None, kind=RequestOutputKind.CUMULATIVE):
            self.n, self.logprobs, self.prompt_logprobs, self.output_kind = n, logprobs, None, kind

    fake = types.ModuleType("vllm.sampling_params")
    fake.RequestOutputKind, fake.SamplingParams = RequestOutputKind, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", fake)
    seen = []

    class LLMEngine:
        def add_request(self, request_id, prompt, params, arrival_time=None):
            seen.append((request_id, params.output_kind))

    final_only.final_outputs_only(types.SimpleNamespace(LLMEngine=LLMEngine))
    engine = LLMEngine()
    engine.add_request("plain", "p", SamplingParams())
    engine.add_request("n2", "p", SamplingParams(n=2))
    engine.add_request("logprobs", "p", SamplingParams(logprobs=1))
    engine.add_request("stream", "p", SamplingParams(kind=RequestOutputKind.DELTA))
    assert seen == [
        ("plain", RequestOutputKind.FINAL_ONLY),
        ("n2", RequestOutputKind.CUMULATIVE),
        ("logprobs", RequestOutputKind.CUMULATIVE),
        ("stream", RequestOutputKind.DELTA),
    ]


def test_the_trainer_s_start_up_heap_is_frozen_once_it_is_built(monkeypatch):
    """GRPO_RIG_VLLM_LEAN: once GRPOTrainer.__init__ returns, its objects leave the collector's generations
    (gc.freeze), so the oldest generation's collections stop walking them during generation."""
    import gc

    class GRPOTrainer:
        def __init__(self):
            self.heap = [[i] for i in range(1000)]

    heap_freeze.freeze_startup_heap(types.SimpleNamespace(GRPOTrainer=GRPOTrainer))
    try:
        before = gc.get_freeze_count()
        GRPOTrainer()
        assert gc.get_freeze_count() >= before + 1000
    finally:
        gc.unfreeze()


@pytest.mark.torch
@pytest.mark.slow  # imports vLLM (about 15 s on 2 cores)
def test_top_k_first_masks_the_logits_exactly_as_vllm_s_sort_does(monkeypatch):
    """GRPO_RIG_VLLM_TOP_K_FIRST: vLLM 0.8.5's own apply_top_k_top_p and the top-k-first path give the same
    masked logits (so the same samples): random rows, ties at the k-th value, per-row k and p. A batch with a
    row whose ties run past the top k, or a row without top-k, goes to vLLM's sort."""
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler as ops

    sorted_calls = []

    def vllm_sort(logits, k, p):
        sorted_calls.append(len(logits))
        return ops.apply_top_k_top_p(logits, k, p)

    fast = top_k_first.top_k_first(vllm_sort)
    torch.manual_seed(0)
    vocab = 5000
    logits = torch.randn(5, vocab) * 3
    logits[1, :8] = logits[1].max() + 1  # 8 equal logits at the top: ties with the k-th (k 5) are kept
    k = torch.tensor([50, 5, 1, 20, 50], dtype=torch.int32)
    p = torch.tensor([0.9, 0.9, 0.5, 0.3, 1.0])
    got = fast(logits.clone(), k.clone(), p.clone())
    assert sorted_calls == []  # the top-k path
    assert torch.equal(got, ops.apply_top_k_top_p(logits.clone(), k.clone(), p.clone()))
    kept = (got > -float("inf")).sum(1).tolist()
    assert kept[1] == 8 and kept[2] == 1 and kept[4] == 50 and 1 < kept[0] < 50, kept
    ties = logits.clone()
    ties[3, :100] = ties[3].max() + 1  # ties past the top k: vLLM's sort
    assert torch.equal(fast(ties.clone(), k.clone(), p.clone()), ops.apply_top_k_top_p(ties.clone(), k, p))
    everything = k.clone()
    everything[0] = vocab  # a row without top-k
    assert torch.equal(
        fast(logits.clone(), everything, p), ops.apply_top_k_top_p(logits.clone(), everything, p)
    )
    assert sorted_calls == [5, 5]
    # the GPU's case: logits computed in bf16 tie often at the k-th value (a Qwen2.5-sized vocabulary)
    bf16 = (torch.randn(32, 151936) * 3).to(torch.bfloat16).float()
    k32, p32 = torch.full((32,), 50, dtype=torch.int32), torch.full((32,), 0.9)
    threshold = bf16.sort(dim=1, descending=True).values[:, 49:50]
    assert int(((bf16 >= threshold).sum(1) > 50).sum()) > 0  # rows whose ties run past the top 50
    got = fast(bf16.clone(), k32.clone(), p32.clone())
    assert sorted_calls == [5, 5]  # the top-k path still
    # which of two tied tokens top-p drops at its boundary follows the sort's order of ties, which vLLM
    # leaves to torch.sort (CPU: unstable); with a stable sort vLLM's result is defined, and is ours
    unstable = torch.Tensor.sort
    monkeypatch.setattr(
        torch.Tensor, "sort", lambda self, *a, **kw: unstable(self, *a, **{**kw, "stable": True})
    )
    assert torch.equal(got, ops.apply_top_k_top_p(bf16.clone(), k32, p32))


@pytest.mark.torch
@pytest.mark.slow  # imports vLLM (about 15 s on 2 cores)
def test_top_k_first_takes_k_from_vllm_s_batch_without_reading_the_gpu_back(monkeypatch):
    """GRPO_RIG_VLLM_TOP_K_FIRST: on the batch vLLM 0.8.5 builds (InputBatch, as ms-swift's requests set it:
    top_k 50, top_p 0.9, and one request with its own), the largest k comes from the batch's host copy: the
    masked logits are vLLM's and no tensor's max is taken on the way (on a GPU that would wait for the
    model's forward before the sampler's launches)."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.sample.ops import topk_topp_sampler as ops
    from vllm.v1.worker import gpu_input_batch

    monkeypatch.setattr(
        gpu_input_batch.InputBatch,
        "_make_sampling_metadata",
        gpu_input_batch.InputBatch._make_sampling_metadata,
    )
    top_k_first._top_k_from_the_host(gpu_input_batch)
    vocab = 151936
    batch = gpu_input_batch.InputBatch(8, 64, 4, torch.device("cpu"), False, vocab)
    for i, (top_k, top_p) in enumerate([(50, 0.9)] * 5 + [(20, 1e-9)]):  # the last: only the likeliest stays
        params = SamplingParams(temperature=0.9, top_k=top_k, top_p=top_p)
        batch.add_request(
            gpu_input_batch.CachedRequestState(
                req_id=str(i),
                prompt_token_ids=[1, 2, 3],
                mm_inputs=[],
                mm_positions=[],
                sampling_params=params,
                generator=None,
                block_ids=[0],
                num_computed_tokens=0,
                output_token_ids=[],
            )
        )
    batch.refresh_sampling_metadata()
    k, p = batch.sampling_metadata.top_k, batch.sampling_metadata.top_p
    assert k.grpo_rig_max == 50 and k.tolist() == [50] * 5 + [20]
    torch.manual_seed(1)
    logits = (torch.randn(6, vocab) * 3).to(torch.bfloat16).float()
    stable = torch.Tensor.sort
    monkeypatch.setattr(
        torch.Tensor, "sort", lambda self, *a, **kw: stable(self, *a, **{**kw, "stable": True})
    )
    expected = ops.apply_top_k_top_p(logits.clone(), k, p)

    def no_read_back(*args, **kwargs):
        raise AssertionError("top_k_first took a max of a tensor")

    sorted_calls = []

    def vllm_sort(logits, k, p):
        sorted_calls.append(len(logits))
        return ops.apply_top_k_top_p(logits, k, p)

    monkeypatch.setattr(torch.Tensor, "max", no_read_back)
    got = top_k_first.top_k_first(vllm_sort)(logits.clone(), k, p)
    assert sorted_calls == []  # the top-k path
    assert torch.equal(got, expected)
    kept = (got > -float("inf")).sum(1).tolist()
    assert all(1 < n <= 50 for n in kept[:5]) and kept[5] == 1, kept


def test_scheduler_steps_reach_ms_swift_s_colocated_engine():
    """GRPO_RIG_VLLM_SCHEDULER_STEPS: GRPOVllmEngine (built by ms-swift 3.6.4's prepare_vllm with keyword
    arguments and no engine_kwargs) gets num_scheduler_steps among its engine arguments, and outputs of
    unfinished requests once per schedule; engine arguments a caller passes are kept, and its own win."""

    class GRPOVllmEngine:
        def __init__(self, model_dir, torch_dtype, *, engine_kwargs=None, max_num_seqs=256):
            self.engine_kwargs, self.max_num_seqs = engine_kwargs, max_num_seqs

    scheduler_steps._scheduler_steps(types.SimpleNamespace(GRPOVllmEngine=GRPOVllmEngine), 8)
    assert GRPOVllmEngine("/m", "bf16", max_num_seqs=32).engine_kwargs == {
        "num_scheduler_steps": 8,
        "multi_step_stream_outputs": False,
    }
    kept = GRPOVllmEngine("/m", "bf16", engine_kwargs={"seed": 1, "num_scheduler_steps": 4})
    assert kept.engine_kwargs == {"seed": 1, "num_scheduler_steps": 4, "multi_step_stream_outputs": False}


@pytest.mark.torch
@pytest.mark.slow  # imports vLLM (about 15 s on 2 cores)
def test_v0_multi_step_runner_exposes_the_model_ms_swift_syncs_weights_into():
    """GRPO_RIG_VLLM_SCHEDULER_STEPS: ms-swift's weight sync reads engine.model_executor.driver_worker.worker
    .model_runner.model; vLLM 0.8.5's MultiStepModelRunner keeps the model on the runner it wraps."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.worker import multi_step_model_runner

    # the engine arguments the hook adds are vLLM's own (ms-swift passes engine_kwargs to EngineArgs)
    args = EngineArgs(model="/m", num_scheduler_steps=8, multi_step_stream_outputs=False)
    assert (args.num_scheduler_steps, args.multi_step_stream_outputs) == (8, False)
    cls = multi_step_model_runner.MultiStepModelRunner
    assert "model" not in vars(cls)
    with pytest.raises(AttributeError):
        _ = object.__new__(cls).model
    scheduler_steps._multi_step_runner_model(multi_step_model_runner)
    try:
        runner = object.__new__(cls)
        runner._base_model_runner = types.SimpleNamespace(model="the wrapped runner's model")
        assert runner.model == "the wrapped runner's model"
        runner.model = "loaded again"
        assert runner._base_model_runner.model == "loaded again"
    finally:
        del cls.model


# One weight copy on the GPU at a time (GRPO_RIG_OFFLOAD_BEFORE_WAKE) ----------------------------------------
class _Executor:
    def __init__(self, gpu):
        self.gpu, self.is_sleeping, self.tags = gpu, True, {"weights", "kv_cache"}


class _Engine:
    """vLLM's LLMEngine as ms-swift drives it: wake_up by tags, sleep, reset_prefix_cache."""

    def __init__(self, gpu):
        self.gpu, self.executor = gpu, _Executor(gpu)

    def wake_up(self, tags):
        self.gpu.event(f"wake {tags[0]}")
        self.executor.tags -= set(tags)
        self.executor.is_sleeping = bool(self.executor.tags)
        if "weights" in tags:
            self.gpu.copies.add("vllm")

    def reset_prefix_cache(self):
        self.gpu.event("reset prefix cache")

    def sleep(self, level):
        self.gpu.event("sleep")
        self.gpu.copies.discard("vllm")
        self.executor.is_sleeping, self.executor.tags = True, {"weights", "kv_cache"}


class _Gpu:
    """The weight copies on the GPU after each event; `peak` is the most at once."""

    def __init__(self):
        self.copies, self.events, self.peak = {"trainer"}, [], 1

    def event(self, name):
        self.events.append(name)
        self.peak = max(self.peak, len(self.copies))


def _fake_grpo_module(gpu):
    """ms-swift 3.6.4's GRPOTrainer._fast_infer order for colocate + sleep + offload (grpo_trainer.py:799-851,
    the sync-mode path), over an engine and offload that count weight copies."""

    class GRPOTrainer:
        vllm_mode, async_generate, request_config = "colocate", False, None

        def __init__(self, sleep_level=1, offload_model=True):
            self.args = types.SimpleNamespace(sleep_level=sleep_level, offload_model=offload_model)
            self.engine = types.SimpleNamespace(engine=_Engine(gpu))
            self.engine.inner_model_executor = self.engine.engine.executor
            self.state, self._last_loaded_step = types.SimpleNamespace(global_step=1), 0

        def _fast_infer(self, inputs):
            if self.engine.inner_model_executor.is_sleeping:
                self.engine.engine.wake_up(tags=["weights"])
            if self.state.global_step != self._last_loaded_step:
                self._move_model_to_vllm()
                self._last_loaded_step = self.state.global_step
            with self.offload_context():
                self.engine.engine.wake_up(tags=["kv_cache"])
                outputs = self._infer_single_or_multi_turn(inputs, None)
                self.engine.engine.reset_prefix_cache()
                self.engine.engine.sleep(level=1)
            return inputs, outputs

        def _move_model_to_vllm(self):
            gpu.event("sync merged weights")

        @contextlib.contextmanager
        def offload_context(self):
            if self.args.offload_model:
                gpu.copies.discard("trainer")
            gpu.event("trainer offloaded")
            yield
            gpu.copies.add("trainer")
            gpu.event("trainer back")

        @contextlib.contextmanager
        def multi_turn_completion_length_context(self):
            yield

        def _infer_single_or_multi_turn(self, inputs, request_config):
            gpu.event("generate")
            return [f"completion of {x}" for x in inputs]

    cuda = types.SimpleNamespace(synchronize=lambda: None)
    return types.SimpleNamespace(
        GRPOTrainer=GRPOTrainer, empty_cache=lambda: None, torch=types.SimpleNamespace(cuda=cuda)
    )


def test_the_trainer_leaves_the_gpu_before_vllm_s_weights_wake():
    """ms-swift's order holds two weight copies at the generation's start (the 7B OOM on a 24 GiB card);
    with the hook one copy is on the GPU at any time, and the step's sync, generation and sleep still
    happen, in that order, with the completions returned."""
    plain = _Gpu()
    _fake_grpo_module(plain).GRPOTrainer()._fast_infer(["p"])
    assert plain.peak == 2 and plain.events[:2] == ["wake weights", "sync merged weights"]

    gpu = _Gpu()
    grpo = _fake_grpo_module(gpu)
    offload_before_wake._offload_first(grpo)
    assert grpo.GRPOTrainer()._fast_infer(["p"]) == (["p"], ["completion of p"])
    assert gpu.peak == 1
    assert gpu.events == [
        "trainer offloaded",
        "wake weights",
        "sync merged weights",
        "wake kv_cache",
        "generate",
        "reset prefix cache",
        "sleep",
        "trainer back",
    ]


@pytest.mark.parametrize("settings", [{"sleep_level": 0}, {"offload_model": False}])
def test_without_sleep_or_model_offload_ms_swift_s_own_order_runs(settings):
    gpu = _Gpu()
    grpo = _fake_grpo_module(gpu)
    offload_before_wake._offload_first(grpo)
    grpo.GRPOTrainer(**settings)._fast_infer(["p"])
    assert gpu.events[:2] == ["wake weights", "sync merged weights"]


def test_a_trainer_without_the_methods_the_new_order_calls_is_a_notice(monkeypatch):
    grpo = types.SimpleNamespace(GRPOTrainer=type("GRPOTrainer", (), {"_fast_infer": lambda self, i: i}))
    with pytest.raises(runtime.MissingTarget, match="has no _move_model_to_vllm"):
        offload_before_wake._offload_first(grpo)


# The 4-bit weights' quantization states leave with them (GRPO_RIG_OFFLOAD_QUANT_STATES) ---------------------
def _quantized_model():
    """A linear layer whose weight carries a bitsandbytes QuantState (nested, as double quantization makes
    it), beside a buffer: what a 4-bit Linear4bit and a rotary embedding hold besides their parameters."""
    import torch
    from bitsandbytes.functional import QuantState

    model = torch.nn.Linear(4, 4)
    nested = QuantState(absmax=torch.ones(2), code=torch.zeros(256), blocksize=256, dtype=torch.float32)
    state = QuantState(
        absmax=torch.zeros(2, dtype=torch.uint8),
        shape=torch.Size([4, 4]),
        code=torch.zeros(16),
        blocksize=64,
        quant_type="nf4",
        dtype=torch.bfloat16,
        offset=torch.tensor(0.0),
        state2=nested,
    )
    model.weight.quant_state = state
    model.register_buffer("inv_freq", torch.ones(2), persistent=False)
    return model, state


def _state_devices(state) -> set[str]:
    tensors = (state.absmax, state.code, state.offset, state.state2.absmax, state.state2.code)
    return {t.device.type for t in tensors}


@pytest.mark.torch
def test_the_quantization_states_and_buffers_move_and_the_parameters_stay_ms_swift_s():
    """Every tensor of a (nested) QuantState and every buffer goes where it is told; the parameters are left
    to ms-swift's own offload_model and load_model."""
    model, state = _quantized_model()
    assert offload_quant_states.move_quant_states(model, "meta") == 2
    assert _state_devices(state) == {"meta"}
    assert model.inv_freq.device.type == "meta"
    assert {p.device.type for p in model.parameters()} == {"cpu"}


@pytest.mark.torch
def test_ms_swift_s_offload_and_load_carry_the_quantization_states_with_the_weights():
    """Around ms-swift 3.6.4's offload_model / load_model (grpo_trainer.py:1457-1466, parameters only): the
    offload moves the states to the CPU after the weights, the load brings them to the trainer's device
    before the weights; both still run ms-swift's own method."""
    import torch

    model, state = _quantized_model()
    calls = []

    class GRPOTrainer:
        def offload_model(self, model):
            calls.append(("offload", _state_devices(state)))

        def load_model(self, model):
            calls.append(("load", _state_devices(state)))

    grpo = types.SimpleNamespace(
        GRPOTrainer=GRPOTrainer, torch=torch, get_current_device=lambda: torch.device("meta")
    )
    offload_quant_states._with_states(grpo)
    trainer = GRPOTrainer()
    trainer.offload_model(model)
    assert _state_devices(state) == {"cpu"}
    trainer.load_model(model)
    assert calls == [("offload", {"cpu"}), ("load", {"meta"})]
    assert model.inv_freq.device.type == "meta"


def test_a_trainer_without_load_model_is_a_notice():
    grpo = types.SimpleNamespace(GRPOTrainer=type("GRPOTrainer", (), {"offload_model": lambda self, m: m}))
    with pytest.raises(runtime.MissingTarget, match="has no load_model"):
        offload_quant_states._with_states(grpo)


# vLLM gets only the trained LoRA adapter (GRPO_RIG_ADAPTER_SYNC) --------------------------------------------
def _tiny_peft_model():
    """A two-layer Qwen2 architecture with a rank-8 LoRA on every linear layer, as ms-swift trains it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    torch.manual_seed(0)
    return get_peft_model(
        Qwen2ForCausalLM(config), LoraConfig(r=8, lora_alpha=32, target_modules="all-linear")
    )


@pytest.mark.torch
def test_the_adapter_is_written_as_peft_saves_it(tmp_path):
    """What vLLM's LoRAModel.from_local_checkpoint reads: the adapter's tensors and its config (vLLM parsed
    these on the lent H200, tests/gpu/test_weight_sync.py, adapter path)."""
    from safetensors.torch import load_file

    size = adapter_sync.write_adapter(_tiny_peft_model(), tmp_path / "a")
    tensors = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert len(tensors) == 2 * 7 * 2  # lora_A and lora_B of 7 linear layers in each of 2 layers
    assert all(k.startswith("base_model.model.model.layers.") for k in tensors)
    assert size == sum(t.numel() * t.element_size() for t in tensors.values())
    assert config["r"] == 8 and config["lora_alpha"] == 32 and config["peft_type"] == "LORA"


@pytest.mark.parametrize(("rank", "served"), [(1, 8), (8, 8), (9, 16), (64, 64), (512, 512)])
def test_vllm_serves_the_adapter_at_the_smallest_rank_it_accepts(rank, served):
    assert adapter_sync.vllm_max_rank(rank) == served


def test_a_lora_rank_vllm_cannot_serve_is_an_error_naming_its_limit():
    with pytest.raises(ValueError, match="up to 512"):
        adapter_sync.vllm_max_rank(1024)


def _fake_adapter_trainer_module(tmp_path, sleep_level=1, mode="colocate"):
    """ms-swift 3.6.4's GRPOTrainer as the adapter hook sees it, with an engine that records its requests."""
    model = _tiny_peft_model()
    calls = []

    class Group:
        tokenizer, lora_tokenizers = "base tokenizer", {}

    Group.lora_tokenizers = types.SimpleNamespace(
        store={}, put=lambda k, v: Group.lora_tokenizers.store.__setitem__(k, v)
    )

    class Engine:
        def __init__(self):
            self._adapters_pool = {}
            self.engine = types.SimpleNamespace(
                reset_prefix_cache=lambda: calls.append("reset prefix cache"), tokenizer=Group
            )

        def infer(self, requests, config, *, use_tqdm=None, adapter_request=None):
            calls.append(("infer", adapter_request))
            return ["completion"]

    class GRPOTrainer:
        vllm_mode = mode

        def __init__(self):
            self.args = types.SimpleNamespace(sleep_level=sleep_level)
            self.model, self.engine = model, Engine()
            self.accelerator = types.SimpleNamespace(unwrap_model=lambda m: m)
            self.state = types.SimpleNamespace(global_step=0)

        def _move_model_to_vllm(self, skip_async_check=False):
            calls.append("merged weights")

        def _engine_infer(self, infer_requests, request_config=None, *, use_tqdm=False):
            calls.append(("infer", None))

    grpo = types.SimpleNamespace(
        GRPOTrainer=GRPOTrainer, profiling_context=lambda trainer, name: contextlib.nullcontext()
    )
    return grpo, calls


@pytest.fixture
def lora_requests(monkeypatch):
    """ms-swift's AdapterRequest and vLLM's LoRARequest as plain records (importing vLLM takes 20 s)."""

    def adapter(name, path):
        return types.SimpleNamespace(name=name, path=path)

    def lora(lora_name, lora_int_id, lora_path):
        return types.SimpleNamespace(name=lora_name, id=lora_int_id, path=lora_path)

    monkeypatch.setattr(adapter_sync, "_request_types", lambda: (adapter, lora))


@pytest.mark.torch
def test_each_step_vllm_generates_with_the_adapter_just_written_and_the_last_is_removed(
    tmp_path, lora_requests
):
    """No merged weights reach vLLM: each sync writes the trained adapter, registers it where ms-swift's
    engine looks it up by name (a new vLLM id each time, so vLLM loads it), and the generation passes it;
    the previous adapter's folder goes once the next one exists."""
    grpo, calls = _fake_adapter_trainer_module(tmp_path)
    adapter_sync._sync_adapter_only(grpo)
    trainer = grpo.GRPOTrainer()
    trainer._move_model_to_vllm()
    first = trainer._grpo_rig_adapter
    assert (Path(first.path) / "adapter_model.safetensors").is_file()
    assert trainer._engine_infer(["prompt"], None) == ["completion"]
    trainer.state.global_step = 1
    trainer._move_model_to_vllm()
    second = trainer._grpo_rig_adapter
    trainer._engine_infer(["prompt"], None)
    assert "merged weights" not in calls
    assert [c for c in calls if c != "reset prefix cache"] == [("infer", first), ("infer", second)]
    assert not Path(first.path).exists() and Path(second.path).is_dir()
    assert (
        list(trainer.engine._adapters_pool) == [second.name]
        and trainer.engine._adapters_pool[second.name].id == 2
    )
    # the adapter carries no tokenizer: vLLM is handed the base model's for its id instead of searching
    assert trainer.engine.engine.tokenizer.lora_tokenizers.store == {1: "base tokenizer", 2: "base tokenizer"}


@pytest.mark.torch
@pytest.mark.parametrize("settings", [{"sleep_level": 2}, {"mode": "server"}])
def test_where_vllm_s_base_weights_are_not_kept_ms_swift_s_merged_sync_runs(
    tmp_path, lora_requests, settings
):
    """SLEEP_LEVEL=2 discards vLLM's weights at each sleep (only ms-swift's merged copy restores them);
    a rollout server is synced by ms-swift's own path."""
    grpo, calls = _fake_adapter_trainer_module(tmp_path, **settings)
    adapter_sync._sync_adapter_only(grpo)
    trainer = grpo.GRPOTrainer()
    trainer._move_model_to_vllm()
    trainer._engine_infer(["prompt"], None)
    assert calls == ["merged weights", ("infer", None)]


def test_the_engine_is_built_with_vllm_s_lora_support_at_the_run_s_rank():
    seen = {}

    class GRPOVllmEngine:
        def __init__(self, model, **kwargs):
            seen.update(kwargs)

    adapter_sync._engine_with_lora(types.SimpleNamespace(GRPOVllmEngine=GRPOVllmEngine), 12)
    GRPOVllmEngine("m", gpu_memory_utilization=0.75)
    assert seen == {"gpu_memory_utilization": 0.75, "enable_lora": True, "max_loras": 1, "max_lora_rank": 16}


def test_a_4_bit_base_is_loaded_4_bit_by_vllm_too_and_the_value_is_read_strictly():
    """QLoRA (QUANT_METHOD=bnb QUANT_BITS=4): vLLM quantizes the same checkpoint with bitsandbytes as it loads
    (quantization and load_format "bitsandbytes"), so the adapter is served on a 4-bit base like the
    trainer's."""
    seen = {}

    class GRPOVllmEngine:
        def __init__(self, model, **kwargs):
            seen.update(kwargs)

    adapter_sync._engine_with_lora(types.SimpleNamespace(GRPOVllmEngine=GRPOVllmEngine), 8, "bitsandbytes")
    GRPOVllmEngine("m", engine_kwargs={"max_num_batched_tokens": 4096})
    assert seen["quantization"] == "bitsandbytes" and seen["enable_lora"] is True
    assert seen["engine_kwargs"] == {"max_num_batched_tokens": 4096, "load_format": "bitsandbytes"}
    assert adapter_sync.parse("8:bitsandbytes") == (8, "bitsandbytes") and adapter_sync.parse("16") == (
        16,
        "",
    )
    assert [adapter_sync.parse(v) for v in ("", "0", "8:awq", "x:bitsandbytes")] == [None] * 4


@pytest.mark.torch
def test_liger_s_grpo_loss_runs_eagerly_and_still_a_chunk_at_a_time(monkeypatch):
    """The planner turns liger's loss on by itself; compiled, torch 2.6 could fail recompiling it when the
    completion lengths change (hooks/liger_eager.py). With the hook, ms-swift's construction (no `compiled`
    argument) gives an eager loss: torch.compile is never called, and the loss and its gradient are the plain
    computation's over lengths that change step to step."""
    import torch
    from liger_kernel.chunked_loss import grpo_loss

    monkeypatch.setattr(
        grpo_loss.LigerFusedLinearGRPOLoss, "__init__", grpo_loss.LigerFusedLinearGRPOLoss.__init__
    )
    liger_eager._eager(grpo_loss)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile called"))
    loss_fn = grpo_loss.LigerFusedLinearGRPOLoss(
        beta=0.0, use_ref_model=False, loss_type="grpo", temperature=1.0
    )
    assert loss_fn.compiled is False
    torch.manual_seed(0)
    weight = torch.randn(32, 16, dtype=torch.float64)
    for length in (5, 9, 3):
        hidden = torch.randn(2, length, 16, dtype=torch.float64, requires_grad=True)
        ids = torch.randint(0, 32, (2, length))
        mask = torch.ones(2, length + 4, dtype=torch.long)[:, -length:]  # a view, as ms-swift's mask is
        advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
        loss, _ = loss_fn(hidden, weight, ids, mask, advantages)
        loss.backward()
        logps = torch.log_softmax(hidden.detach() @ weight.T, dim=-1).gather(2, ids.unsqueeze(2)).squeeze(2)
        # GRPO at the old policy: the ratio is 1, so the loss is -mean(advantage) over each row's tokens
        assert (
            abs(float(loss) + float((advantages.unsqueeze(1) * torch.ones_like(logps)).mean(1).mean())) < 1e-6
        )
        assert hidden.grad is not None and torch.isfinite(hidden.grad).all()
