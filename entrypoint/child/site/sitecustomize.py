"""Hooks the entrypoint installs in its child processes (trainer, rollout server and their workers).

The plan puts this folder first on the children's PYTHONPATH whenever one of the variables below is set
(`plan` shows both); Python imports `sitecustomize` at start-up. Each hook acts only once the library it
patches is imported by the child itself: nothing here imports torch, vLLM or ms-swift early.

GRPO_RIG_EMULATE_VRAM_GB=N (EMULATE_VRAM_GB): the process acts as if its GPU had N GiB, e.g. an RTX 4090 on
    an H200, for everything that sizes itself from the card:
    - torch's allocator is capped at N GiB (`set_per_process_memory_fraction`, applied when CUDA initialises
      through `torch.cuda._lazy_call`, so importing torch creates no CUDA context);
    - `torch.cuda.mem_get_info()` answers total = N GiB and free = N GiB minus what this process uses.
      vLLM sizes itself from exactly these two numbers: its KV cache is gpu_memory_utilization x total
      minus what the process already holds (vllm 0.8.5.post1 v1/worker/gpu_worker.py:170-215;
      worker/worker.py:225-260 for the V0 engine). Without this, VLLM_GPU_MEMORY_UTILIZATION=0.4 asked for
      0.4 x 139 GiB under a 24 GiB cap;
    - vLLM's NVML-based card size (`get_device_total_memory`) is capped the same way.
    "What this process uses" is NVML's figure for this PID (so several emulated cards on one GPU stay
    apart); where NVML does not list the process (a container's PID namespace), torch's reserved memory
    plus a context's 0.5 GiB.
GRPO_RIG_VLLM_KEEP_POOLS=1: keep vLLM's sleep-mode memory pools alive until the process is gone.
    With sleep mode (SLEEP_LEVEL >= 1) vLLM allocates through a pluggable CUDA allocator inside torch
    MemPools (vllm/device_allocator/cumem.py). At interpreter exit the garbage collector may destroy the
    allocator before its pool, or free the pool's blocks after vLLM released them: the trainer then dies
    after training with SIGSEGV, or SIGABRT "Trying to free a pointer not allocated here" in
    CUDAPluggableAllocator::raw_delete from MemPool::~MemPool (vllm-project/vllm#16993; the ordering
    analysis is vllm-project/vllm#46050). A pool and its allocator that are never collected are never torn
    down; the operating system reclaims the memory when the process ends.
GRPO_RIG_EVENTS=PATH: rank 0 of the trainer appends one JSON line per GRPO phase to PATH:
    {"t": unix seconds, "phase": "sync" | "generate" | "rollout" | "train", "seconds": ..., ...},
    where `rollout` is generation plus scoring and log-probs (ms-swift 3.6.4
    GRPOTrainer._generate_and_score_completions), `generate` the generation inside it
    (_generate_completions), `sync` the weight push to vLLM (_move_model_to_vllm) and `train` one
    micro-batch's training_step, which holds the round's rollout on the round's first micro-batch (HF
    Trainer.training_step -> ms-swift _prepare_inputs). The console heartbeat and the throughput
    benchmark read them; ms-swift's own logs stay as they are.
    Start-up is recorded in the same file, so a reader can name the cause of each second before the first
    step: {"phase": "start", "process": "swift" | "launcher" | "worker"} when each process of the trainer's
    tree starts, {"phase": "import", "module": ..., "seconds": ...} for the heavy imports of the worker,
    and {"phase": "startup", "mark": ..., "seconds": ...} for "arguments parsed", "model loaded", "dataset ready",
    "vLLM engine starting", "vLLM engine ready", "trainer ready" and "first step logged" (ms-swift 3.6.4
    SwiftPipeline._parse_args, SwiftRLHF._prepare_model_tokenizer, SwiftSft._encode_dataset, GRPOTrainer.__init__,
    prepare_vllm and log). entrypoint/startup.py turns them into the start-up table.
GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS=1: vLLM captures CUDA graphs only for batch sizes it can run. vLLM 0.8.5's
    V1 engine captures 67 sizes, 1 to 512 sequences, whatever max_num_seqs says (vllm/config.py
    VllmConfig._set_cudagraph_sizes; its V0 branch stops at the first size >= max_num_seqs, which is the
    rule used here). A colocated engine runs at most per_device_train_batch_size x steps_per_generation
    sequences (ms-swift 3.6.4 GRPOTrainer.prepare_vllm), 32 for countdown-1x4090: 7 sizes instead of 67,
    whose capture took 39 of the engine's 61 s on the lent H200 (docs/benchmarks/raw/h200-2026-12-01/).
    A decode step of more sequences than max_num_seqs never happens, so no step loses its graph. A recipe
    that sets its own capture sizes (compilation_config) keeps them.
GRPO_RIG_VLLM_INSPECT_HERE=1: vLLM inspects the model's class in this process once CUDA is initialised here.
    vLLM 0.8.5 imports a lazily registered model class in a fresh Python process to read its interfaces, "to
    avoid initializing CUDA" in a process that may fork workers later (vllm/model_executor/models/registry.py
    _LazyRegisteredModel.inspect_model_cls, _run_in_subprocess). A colocated engine starts inside the
    trainer, which initialised CUDA long before and forks no engine process (ms-swift 3.6.4 uses vLLM's
    external launcher, which disables V1 multiprocessing): there the subprocess protects nothing and costs
    its whole start-up, torch, transformers and vLLM imported again (14 s of the 74 s warm start-up on the
    lent H200, docs/benchmarks/raw/h200-2026-12-02/). A process that has not initialised CUDA (the rollout
    server, `evaluate`) keeps vLLM's subprocess.
GRPO_RIG_VLLM_TOP_K_FIRST=1: vLLM's top-k/top-p sampling without sorting the vocabulary. Without FlashInfer
    (not in the image's stack), vLLM 0.8.5's V1 sampler sorts every row of the logits over the whole
    vocabulary when a request sets top_p (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p): 0.95 ms of
    a 4.5 ms decode step for 32 sequences over Qwen2.5's 151,936 tokens on the lent H200, where a top-50
    costs 0.13 ms (docs/benchmarks/raw/h200-2026-12-02-lease5/generation-sampler.json; ms-swift's GRPO
    samples with top_k 50 and top_p 0.9). When every row has a top-k of at most 1024, the same mask comes
    from the top k: the k-th largest logit is the threshold (ties with it kept, as vLLM keeps them), and
    top-p is applied to the survivors in vLLM's ascending order (softmax, cumulative sum, masked where it
    stays <= 1 - p, the largest always kept). The masked logits are vLLM's, so the same tokens are sampled
    from the same random draws. It looks at twice the top k: logits computed in bf16 tie often at the k-th
    value (with exactly k, the sixth lease's py-spy found nearly every GPU step sent back to the sort). The
    largest k, k - 1 as an index and 1 - p come from where vLLM copies the batch's sampling settings to the
    GPU (once per change of the batch): a step reads the GPU back once, for the ties' check, after all but
    its last two launches.
    Rows whose ties run past that window, rows without top-k and larger k take vLLM's own path. Equal
    logits at the top-p boundary are dropped in a stable sort's order (ascending token id), where vLLM
    leaves the order to torch.sort (tests/test_site_hooks.py).
GRPO_RIG_VLLM_LEAN=1: a colocated engine builds only the outputs ms-swift reads, and the trainer's start-up
    heap leaves the garbage collector's view. ms-swift 3.6.4's colocate generation (VllmEngine.infer without
    streaming, vllm_engine.py:486-500) keeps each request's finished RequestOutput and decodes its token ids
    itself (template.decode(output.token_ids), :387); vLLM 0.8.5's V1 engine builds a RequestOutput for every
    request at every decode step unless the request asks for FINAL_ONLY (v1/engine/output_processor.py:144-
    160). A request with n=1 and no logprobs asks for FINAL_ONLY here: the same tokens, text and finish
    reason reach ms-swift, once. Then, once GRPOTrainer is built (model, reference, vLLM engine loaded), the
    heap is collected once and frozen (gc.freeze, as later vLLM versions do after their engine starts):
    the oldest generation's collections no longer walk the millions of objects torch, transformers and
    vLLM left at start-up, pauses that land inside a decode loop. Each phase event records the collector's
    seconds inside it (`gc_seconds`).
GRPO_RIG_VLLM_SCHEDULER_STEPS=N (N > 1, with VLLM_USE_V1=0; plan sets both from VLLM_SCHEDULER_STEPS, which
    the planner chooses by predicted step time, entrypoint/shape.py): ms-swift 3.6.4's colocated engine runs
    vLLM's V0 engine with N decode steps per schedule (multi-step scheduling: the host schedules, and turns
    the sampled tokens into Python objects, once per N steps). On the tenth lease, vLLM alone, a round of
    32 x 256 tokens took 0.99 s against 1.40 s on V1 with top-k first
    (docs/benchmarks/raw/h200-2026-12-03-lease10-explore). GRPOTrainer.prepare_vllm passes a fixed set of
    engine arguments; GRPOVllmEngine takes engine_kwargs, which this fills, with multi_step_stream_outputs
    off: ms-swift reads only finished requests (VllmEngine._infer_full), which V0 still returns at the step
    they finish (engine/llm_engine.py:1129-1168), so the outputs of unfinished ones are built once per N
    steps instead of every step. V0's MultiStepModelRunner wraps the model runner without the `model`
    attribute ms-swift's weight sync reads (VllmEngine.inner_model): it is given one, the wrapped runner's.
GRPO_RIG_REWARD_CHECK=1: every reward function's answer is checked as ms-swift receives it (ms-swift 3.6.4
    GRPOTrainer._score_completions). A function that raises, returns a list of the wrong length, or a value
    that is not a number (a string, a list) or is infinite ends the run with a line naming the function, the
    row (its completion and columns) and the value (`grpo-rig reward check: ...`, which the entrypoint shows
    as the run's failure), instead of an unrelated traceback from torch.tensor later. None and NaN follow
    ms-swift's rules (recorded as NaN, left out of the row's sum) except on a row where every reward
    function gave one: there ms-swift's own warning fails with "TypeError: 'TrainerState' object is not
    subscriptable" (it indexes the trainer state as a column), so the run ends naming the row instead.
    A reward model (an nn.Module) is not checked.
GRPO_RIG_SYNC_PROBE=PATH: after the first optimizer step, rank 0 checks that vLLM generates from the weights
    the trainer trained (grpo_rig_probe.py beside this file; tests/gpu/test_weight_sync.py). With
    GRPO_RIG_SYNC_PROBE_BREAK=1 the weight push is skipped, the fault the check exists to see.

Any other sitecustomize on the path (a distribution's, a user's) still runs: it is executed after these.
"""

import contextlib
import ctypes
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time

_EMULATE_GIB = float(os.environ.get("GRPO_RIG_EMULATE_VRAM_GB") or 0)
_KEEP_POOLS = os.environ.get("GRPO_RIG_VLLM_KEEP_POOLS") == "1"
_EVENTS = os.environ.get("GRPO_RIG_EVENTS", "")
_GRAPHS_UP_TO_MAX_SEQS = os.environ.get("GRPO_RIG_VLLM_GRAPHS_UP_TO_MAX_SEQS") == "1"
_INSPECT_HERE = os.environ.get("GRPO_RIG_VLLM_INSPECT_HERE") == "1"
_SYNC_PROBE = os.environ.get("GRPO_RIG_SYNC_PROBE", "")
_REWARD_CHECK = os.environ.get("GRPO_RIG_REWARD_CHECK") == "1"
_LEAN = os.environ.get("GRPO_RIG_VLLM_LEAN") == "1"
_TOP_K_FIRST = os.environ.get("GRPO_RIG_VLLM_TOP_K_FIRST") == "1"
# a measuring knob: anything but a number leaves the engine as it is (a child's start-up must not fail here)
_SCHEDULER_STEPS = os.environ.get("GRPO_RIG_VLLM_SCHEDULER_STEPS", "")
_SCHEDULER_STEPS = int(_SCHEDULER_STEPS) if _SCHEDULER_STEPS.isdigit() else 1
_STARTED = time.time()
GIB = 1024**3
CONTEXT_BYTES = (
    512 * 1024**2
)  # a CUDA context and cuBLAS workspace, where NVML cannot tell this process's use


def _say(text):
    print(f"grpo-rig site: {text}", file=sys.stderr, flush=True)


# --- EMULATE_VRAM_GB -------------------------------------------------------------------------------


class _Nvml:
    """This process's memory on a device, from NVML; None when NVML cannot tell."""

    handles = {}
    ready = None

    @classmethod
    def own_use(cls, torch, index):
        if cls.ready is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                cls.ready = pynvml
            except Exception:
                cls.ready = False
        if not cls.ready:
            return None
        nvml = cls.ready
        try:
            if index not in cls.handles:
                uuid = str(torch.cuda.get_device_properties(index).uuid)
                cls.handles[index] = nvml.nvmlDeviceGetHandleByUUID(
                    uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
                )
            pid = os.getpid()
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(cls.handles[index]):
                if proc.pid == pid and isinstance(proc.usedGpuMemory, int):
                    return proc.usedGpuMemory
        except Exception:
            return None
        return None


def emulated_mem_info(free: int, total: int, used: int, limit: float) -> tuple[int, int]:
    """(free, total) bytes of a card of `limit` bytes for a process using `used` bytes of it, never more
    free than the real device has."""
    card = min(int(limit), total)
    return max(0, min(free, card - used)), card


def _emulate_card(torch):
    limit = _EMULATE_GIB * GIB

    def cap():
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), index)

    torch.cuda._lazy_call(cap)
    real_mem_get_info = torch.cuda.memory.mem_get_info

    @functools.wraps(real_mem_get_info)
    def mem_get_info(device=None):
        free, total = real_mem_get_info(device)
        index = torch.cuda._utils._get_device_index(device, optional=True)
        used = _Nvml.own_use(torch, index)
        if used is None:  # NVML does not list this PID (a PID namespace): torch's own share, plus a context
            used = torch.cuda.memory_reserved(index) + CONTEXT_BYTES
        return emulated_mem_info(free, total, used, limit)

    torch.cuda.memory.mem_get_info = mem_get_info
    torch.cuda.mem_get_info = mem_get_info


def _emulate_card_for_vllm(cuda_platform):
    """vLLM also reads the card's size through NVML, to pick its default batch of tokens per step
    (vllm 0.8.5.post1 engine/arg_utils.py:1580-1600): report the emulated card there too."""
    limit = int(_EMULATE_GIB * GIB)
    for cls in (cuda_platform.NvmlCudaPlatform, cuda_platform.NonNvmlCudaPlatform):
        real = cls.get_device_total_memory.__func__

        def get_device_total_memory(klass, device_id=0, real=real):
            return min(limit, real(klass, device_id))

        cls.get_device_total_memory = classmethod(get_device_total_memory)


# --- vLLM sleep-mode pools -------------------------------------------------------------------------


def _keep_vllm_pools(cumem):
    original = cumem.use_memory_pool_with_allocator

    @contextlib.contextmanager
    def use_memory_pool_with_allocator(*args, **kwargs):
        with original(*args, **kwargs) as data:
            for obj in data:  # (MemPool, CUDAPluggableAllocator): one reference nobody ever drops
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
            yield data

    cumem.use_memory_pool_with_allocator = use_memory_pool_with_allocator
    _say("vLLM sleep-mode memory pools are kept until exit (vllm-project/vllm#16993)")


# --- phase events ----------------------------------------------------------------------------------


def _rank0():
    return os.environ.get("RANK", "0") == "0"


def _event(row):
    row = {"t": round(time.time(), 3), **row}
    with contextlib.suppress(OSError), open(_EVENTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def _process_label():
    """Which process of the trainer's tree this is: ms-swift's CLI, torchrun, or the training worker."""
    argv = getattr(sys, "orig_argv", sys.argv)
    if "torch.distributed.run" in argv:  # its argv names rlhf.py too
        return "launcher"
    if any(a.endswith(os.path.join("cli", "rlhf.py")) for a in argv):  # torchrun's ranks and a lone worker
        return "worker"
    return os.path.basename(argv[1]) if len(argv) > 1 else os.path.basename(argv[0])


def _timed(cls, name, make_row):
    """Wrap cls.name: after each call, `make_row(self, args, seconds)` gives the event to write (or None)."""
    method = getattr(cls, name, None)
    if method is None:
        return

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        start, collected = time.time(), _GC_SECONDS[0]
        try:
            return method(self, *args, **kwargs)
        finally:
            with contextlib.suppress(Exception):
                row = make_row(self, args, round(time.time() - start, 3))
                if row:
                    if row.get("phase") in ("sync", "generate", "rollout", "train"):
                        row["gc_seconds"] = round(_GC_SECONDS[0] - collected, 3)
                    _event(row)

    setattr(cls, name, wrapper)


_GC_SECONDS = [0.0]  # the garbage collector's seconds in this process since _count_gc


def _count_gc():
    import gc

    began = [0.0]

    def callback(stage, info):
        if stage == "start":
            began[0] = time.perf_counter()
        else:
            _GC_SECONDS[0] += time.perf_counter() - began[0]

    gc.callbacks.append(callback)


def _once_built(cls, then, what):
    """Wrap cls.__init__ so that `then(self)` runs once the object is built; a failure of `then` is said as
    "`what` not installed", never raised (a hook must never take the trainer down)."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            then(self)
        except Exception as exc:
            _say(f"{what} not installed: {exc!r}")

    cls.__init__ = __init__


def _phase(phase, count=None):
    def make_row(self, args, seconds):
        state = getattr(self, "state", None)
        row = {"phase": phase, "seconds": seconds, "step": getattr(state, "global_step", None)}
        if count is not None and args:
            row["completions"] = count(args[0])
        return row

    return make_row


def _mark(mark, once=False):
    done = []

    def make_row(self, args, seconds):
        if once and done:
            return None
        done.append(True)
        return {"phase": "startup", "mark": mark, "seconds": seconds}

    return make_row


def _record_phases(grpo):
    if not _rank0():
        return
    cls = grpo.GRPOTrainer
    _timed(cls, "_move_model_to_vllm", _phase("sync"))
    _timed(cls, "_generate_completions", _phase("generate", count=len))
    _timed(cls, "_generate_and_score_completions", _phase("rollout", count=len))
    _timed(cls, "training_step", _phase("train"))
    _timed(cls, "__init__", _mark("trainer ready"))
    _timed(cls, "log", _mark("first step logged", once=True))
    prepare = getattr(cls, "prepare_vllm", None)
    if prepare is not None:

        @functools.wraps(prepare)
        def prepare_vllm(self, *args, **kwargs):
            _event({"phase": "startup", "mark": "vLLM engine starting"})
            return prepare(self, *args, **kwargs)

        cls.prepare_vllm = prepare_vllm
        _timed(cls, "prepare_vllm", _mark("vLLM engine ready"))


def _record_arguments(base):
    if _rank0():
        _timed(base.SwiftPipeline, "_parse_args", _mark("arguments parsed", once=True))


def _record_model_load(rlhf):
    if _rank0():
        _timed(rlhf.SwiftRLHF, "_prepare_model_tokenizer", _mark("model loaded"))


def _record_dataset(sft):
    if _rank0():
        _timed(sft.SwiftSft, "_encode_dataset", _mark("dataset ready"))


# --- vLLM's CUDA graphs ----------------------------------------------------------------------------

CAPTURE_SIZES = [1, 2, 4] + list(range(8, 513, 8))  # vLLM 0.8.5's candidates (vllm/config.py)


def graph_sizes(max_num_seqs, max_num_batched_tokens):
    """The batch sizes to capture: the candidates up to the first one >= max_num_seqs (vLLM's V0 rule)."""
    cap = next((size for size in CAPTURE_SIZES if size >= max_num_seqs), CAPTURE_SIZES[-1])
    return [size for size in CAPTURE_SIZES if size <= min(cap, max_num_batched_tokens)]


def _graphs_up_to_max_seqs(config):
    cls = config.VllmConfig
    original = cls._set_cudagraph_sizes

    @functools.wraps(original)
    def _set_cudagraph_sizes(self):
        compilation, scheduler, model = self.compilation_config, self.scheduler_config, self.model_config
        parallel = self.parallel_config
        if (
            compilation.cudagraph_capture_sizes is None
            and scheduler is not None
            and model is not None
            and not model.enforce_eager
            and not (
                parallel.tensor_parallel_size > 1 and compilation.pass_config.enable_sequence_parallelism
            )
        ):
            sizes = graph_sizes(scheduler.max_num_seqs, scheduler.max_num_batched_tokens)
            compilation.cudagraph_capture_sizes = sizes
            _say(f"vLLM captures CUDA graphs for {len(sizes)} batch sizes up to {sizes[-1]} "
                 f"(max_num_seqs {scheduler.max_num_seqs}), not 67 up to 512")  # fmt: skip
        original(self)

    cls._set_cudagraph_sizes = _set_cudagraph_sizes


# --- vLLM's model inspection ----------------------------------------------------------------------


def _inspect_here_once_cuda_is_up(registry):
    lazy = registry._LazyRegisteredModel
    original = lazy.inspect_model_cls

    @functools.wraps(original)
    def inspect_model_cls(self):
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return registry._ModelInfo.from_model_cls(self.load_model_cls())
        return original(self)

    lazy.inspect_model_cls = inspect_model_cls


# --- vLLM's top-k/top-p sampling ------------------------------------------------------------------

TOP_K_FIRST_LIMIT = 1024  # the largest top-k taken this way; beyond it a sort is no slower


def _k_index(k):
    """k [rows] -> [rows, 1] int64: the column of the k-th largest in a descending top-k."""
    return k.long().sub(1).unsqueeze(1)


def _keep_above(p):
    """p [rows] -> [rows, 1]: top-p drops an ascending cumulative probability at or below 1 - p."""
    return 1 - p.unsqueeze(1)


def top_k_first(original):
    """vLLM's apply_top_k_top_p(logits [rows, vocab] float, k [rows] int | None, p [rows] float | None) ->
    masked logits, computed from the top k instead of a sort over the vocabulary (GRPO_RIG_VLLM_TOP_K_FIRST
    above); `original` (vLLM's) where that cannot give the same mask. A decode step is bound by the host's
    launches (ninth lease's py-spy: about 0.1 ms of one core per tensor operation here), so it launches as
    few operations as it can: what depends only on k and p comes from the batch (_top_k_from_the_host), and
    `logits` is overwritten in place, as vLLM's function may do."""

    def apply_top_k_top_p(logits, k, p):
        if k is None or p is None:
            return original(logits, k, p)
        k_max = getattr(k, "grpo_rig_max", None)
        if k_max is None:  # k not from vLLM's batch: read it back (waits for the GPU)
            k_max = int(k.max())
        # twice the top k: logits computed in bf16 often tie with the k-th, and vLLM keeps every tie (on the
        # GPU, taking exactly k_max sent nearly every step back to the sort: sixth lease's py-spy)
        window = 2 * k_max
        if k_max > TOP_K_FIRST_LIMIT or window >= logits.shape[1]:
            return original(logits, k, p)
        k_index = getattr(k, "grpo_rig_index", None)
        if k_index is None:
            k_index = _k_index(k)
        keep_above = getattr(p, "grpo_rig_complement", None)
        if keep_above is None:
            keep_above = _keep_above(p)
        values, index = logits.topk(window, dim=1)  # descending
        threshold = values.gather(1, k_index)
        # ascending value, ties by ascending token id (a stable sort's order): top-p drops tied tokens at
        # its boundary in that order
        ids, by_id = index.sort(dim=1)
        ascending, position = values.gather(1, by_id).sort(dim=1, stable=True)
        ids = ids.gather(1, position)
        ascending = ascending.masked_fill(ascending < threshold, -float("inf"))
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        # the most likely token (the last column) always stays
        ascending[:, :-1].masked_fill_(cumulative[:, :-1] <= keep_above, -float("inf"))
        # ties with the k-th may run past the window; asked last, so the launches above overlap the model
        if bool((values[:, -1:] >= threshold).any()):
            return original(logits, k, p)
        return logits.fill_(-float("inf")).scatter_(1, ids, ascending)

    return apply_top_k_top_p


def _sample_top_k_first(sampler_ops):
    sampler_ops.apply_top_k_top_p = top_k_first(sampler_ops.apply_top_k_top_p)


def _top_k_from_the_host(gpu_input_batch):
    """Where vLLM copies the batch's top-k and top-p to the GPU (InputBatch._make_sampling_metadata, once per
    change of the batch, not per step), the largest k is read from its host copy and what top_k_first
    derives from k and p is computed once, kept on the GPU tensors themselves (the metadata hands the same
    objects to every step until the batch changes)."""
    cls = gpu_input_batch.InputBatch
    original = cls._make_sampling_metadata

    @functools.wraps(original)
    def _make_sampling_metadata(self):
        metadata = original(self)
        k, p = metadata.top_k, metadata.top_p
        if k is not None and self.num_reqs > 0:
            k.grpo_rig_max = int(self.top_k_cpu[: self.num_reqs].max())
            k.grpo_rig_index = _k_index(k)
        if p is not None:
            p.grpo_rig_complement = _keep_above(p)
        return metadata

    cls._make_sampling_metadata = _make_sampling_metadata


# --- vLLM's V0 multi-step scheduling ---------------------------------------------------------------


def _scheduler_steps(grpo_vllm_engine):
    cls = grpo_vllm_engine.GRPOVllmEngine
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        engine_kwargs = dict(kwargs.get("engine_kwargs") or {})
        engine_kwargs.setdefault("num_scheduler_steps", _SCHEDULER_STEPS)
        engine_kwargs.setdefault("multi_step_stream_outputs", False)
        kwargs["engine_kwargs"] = engine_kwargs
        original(self, *args, **kwargs)

    cls.__init__ = __init__


def _multi_step_runner_model(multi_step_model_runner):
    cls = multi_step_model_runner.MultiStepModelRunner
    if "model" not in vars(cls):

        def set_model(self, model):
            self._base_model_runner.model = model

        cls.model = property(lambda self: self._base_model_runner.model, set_model)


# --- a colocated engine's per-step work ----------------------------------------------------------


def _final_outputs_only(v1_llm_engine):
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    cls = v1_llm_engine.LLMEngine
    original = cls.add_request

    @functools.wraps(original)
    def add_request(self, request_id, prompt, params, *args, **kwargs):
        if (
            isinstance(params, SamplingParams)
            and params.n == 1
            and params.output_kind == RequestOutputKind.CUMULATIVE
            and params.logprobs is None
            and params.prompt_logprobs is None
        ):
            params.output_kind = RequestOutputKind.FINAL_ONLY
        return original(self, request_id, prompt, params, *args, **kwargs)

    cls.add_request = add_request


def _freeze_startup_heap(grpo):
    import gc

    def freeze(trainer):
        gc.collect()
        gc.freeze()

    _once_built(grpo.GRPOTrainer, freeze, "start-up heap freeze")


# --- the weight-sync probe -------------------------------------------------------------------------


def _install_sync_probe(grpo):
    if not _rank0():
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, here)
    try:
        import grpo_rig_probe
    finally:
        sys.path.remove(here)
    grpo_rig_probe.install(grpo.GRPOTrainer, _SYNC_PROBE, os.environ.get("GRPO_RIG_SYNC_PROBE_BREAK") == "1")


# --- the reward check ------------------------------------------------------------------------------

REWARD_MARK = "grpo-rig reward check:"  # entrypoint/deaths.py finds the failure by it in the trainer's log


class RewardCheckFailed(RuntimeError):
    """A reward function's answer that ms-swift cannot score: the run ends here, naming it."""


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row(i, completions, kwargs):
    """'row 3 of the batch (completion '...'; nums=[1, 2], target=3)'."""
    columns = [f"{k}={_short(v[i], 40)}" for k, v in kwargs.items()
               if k not in ("messages", "trainer_state") and isinstance(v, list) and len(v) == len(completions)]  # fmt: skip
    return f"row {i} of the batch (completion {_short(completions[i])}{'; ' if columns else ''}{', '.join(columns)})"


def _fail(message):
    print(f"{REWARD_MARK} {message}", file=sys.stderr, flush=True)
    raise RewardCheckFailed(message)


def _missing(value):
    return value is None or (isinstance(value, float) and value != value)  # None or NaN


def _bad_value(value):
    """Why ms-swift cannot score `value` ('' when it can: a number, None or NaN)."""
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, str | bytes):
        return "is not a number"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "is not a number"
    return (
        "is infinite: GRPO's advantages would become NaN" if number in (float("inf"), float("-inf")) else ""
    )


def _culprit(func, completions, kwargs):
    """The first row on which `func` raises when called alone ('' when none does)."""
    for i in range(min(len(completions), 64)):
        one = {
            k: v[i : i + 1] if isinstance(v, list) and len(v) == len(completions) else v
            for k, v in kwargs.items()
        }
        try:
            func(completions[i : i + 1], **one)
        except Exception:
            return _row(i, completions, kwargs)
    return ""


def _guarded(func, name, index, answers):
    """`func` checked (GRPO_RIG_REWARD_CHECK above). ms-swift calls the reward functions once each, in order,
    per scoring round: function `index` 0 starts `answers` afresh, the last one (`answers.count`) looks for a
    row none of them scored. index None: not compared (a reward model is among the functions)."""

    def reward(completions, **kwargs):
        try:
            values = func(completions, **kwargs)
        except Exception as exc:
            where = _culprit(func, completions, kwargs) or f"a batch of {len(completions)} completions"
            _fail(f"reward function {name} raised {type(exc).__name__}: {exc} on {where}")
        try:
            values = list(values)
        except TypeError:
            values = None
        if values is None or len(values) != len(completions):
            _fail(f"reward function {name} returned {_short(values)} for {len(completions)} completions: "
                  "it must return one number (or None) per completion")  # fmt: skip
        for i, value in enumerate(values):
            why = _bad_value(value)
            if why:
                _fail(
                    f"reward function {name} returned {_short(value)} for {_row(i, completions, kwargs)}: it {why}"
                )
        if index is not None:
            answers[:] = [*(answers if index else []), (name, values)]
            if index == answers.count - 1:
                _all_missing(answers, completions, kwargs)
        return values

    return reward


class _Answers(list):
    """One scoring round's answers: (function name, values) in call order; `count` functions in all."""

    count = 0


def _all_missing(answers, completions, kwargs):
    """End the run at a row every reward function left without a value (None or NaN)."""
    for i in range(len(completions)):
        if all(_missing(values[i]) for _, values in answers):
            given = "; ".join(f"{name}: {_short(values[i])}" for name, values in answers)
            _fail(f"every reward function returned None or NaN for {_row(i, completions, kwargs)} ({given}): ms-swift "
                  "3.6.4 cannot score such a row (its warning about it fails with \"'TrainerState' object is not "
                  "subscriptable\"); return 0.0 where a reward does not apply")  # fmt: skip


def _reward_names(funcs, names):
    """'countdown (CountdownEquation)': the REWARD_FUNCS name beside ms-swift's class name."""
    orms = getattr(sys.modules.get("swift.plugin"), "orms", {})  # imported by the trainer by now
    keys = {cls: key for key, cls in orms.items()}
    return [f"{keys[type(f)]} ({n})" if type(f) in keys else n for f, n in zip(funcs, names, strict=True)]


def _guard_rewards(trainer):
    module = getattr(getattr(sys.modules.get("torch"), "nn", None), "Module", ())  # a reward model
    funcs = trainer.reward_funcs
    plain = [not isinstance(f, module) for f in funcs]
    names = _reward_names(funcs, trainer.reward_func_names)
    answers = _Answers()
    answers.count = len(funcs)
    for i, func in enumerate(funcs):
        if plain[i]:
            funcs[i] = _guarded(func, names[i], i if all(plain) else None, answers)


def _check_rewards(grpo):
    _once_built(grpo.GRPOTrainer, _guard_rewards, "reward check")


# --- import hooks ----------------------------------------------------------------------------------

# the worker's imports whose seconds are recorded: the libraries, ms-swift's training code, its GRPO trainer
WORKER_IMPORTS = ("torch", "transformers", "swift.llm.train", "peft", "trl", "deepspeed", "vllm",
                  "swift.trainers.rlhf_trainer.grpo_trainer")  # fmt: skip
_AFTER_IMPORT = {}  # module name -> hooks to run once it is imported
_TIMED_IMPORTS = set()  # modules whose import time is recorded


def _after(name, hook):
    _AFTER_IMPORT.setdefault(name, []).append(hook)


if _EMULATE_GIB > 0:
    _after("torch", _emulate_card)
    _after("vllm.platforms.cuda", _emulate_card_for_vllm)
if _KEEP_POOLS:
    _after("vllm.device_allocator.cumem", _keep_vllm_pools)
if _GRAPHS_UP_TO_MAX_SEQS:
    _after("vllm.config", _graphs_up_to_max_seqs)
if _INSPECT_HERE:
    _after("vllm.model_executor.models.registry", _inspect_here_once_cuda_is_up)
if _TOP_K_FIRST:
    _after("vllm.v1.sample.ops.topk_topp_sampler", _sample_top_k_first)
    _after("vllm.v1.worker.gpu_input_batch", _top_k_from_the_host)
if _SCHEDULER_STEPS > 1:
    _after("swift.llm.infer.infer_engine.grpo_vllm_engine", _scheduler_steps)
    _after("vllm.worker.multi_step_model_runner", _multi_step_runner_model)
if _LEAN:  # before the phase timers, so "trainer ready" includes the one collection
    _after("vllm.v1.engine.llm_engine", _final_outputs_only)
    _after("swift.trainers.rlhf_trainer.grpo_trainer", _freeze_startup_heap)
if _SYNC_PROBE:  # before the phase timers, so the probe's seconds are not counted as the sync's
    _after("swift.trainers.rlhf_trainer.grpo_trainer", _install_sync_probe)
if _REWARD_CHECK:
    _after("swift.trainers.rlhf_trainer.grpo_trainer", _check_rewards)
if _EVENTS:
    _count_gc()
    _after("swift.trainers.rlhf_trainer.grpo_trainer", _record_phases)
    _after("swift.llm.base", _record_arguments)
    _after("swift.llm.train.rlhf", _record_model_load)
    _after("swift.llm.train.sft", _record_dataset)
    if _rank0() and _process_label() in ("swift", "launcher", "worker"):
        _event({"phase": "start", "process": _process_label(), "t": round(_STARTED, 3)})
        if _process_label() == "worker":
            _TIMED_IMPORTS.update(WORKER_IMPORTS)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `_AFTER_IMPORT[name]` right after the child imports `name`, once; times `_TIMED_IMPORTS`."""

    def find_spec(self, fullname, path, target=None):
        hooks = _AFTER_IMPORT.pop(fullname, [])
        timed = fullname in _TIMED_IMPORTS
        _TIMED_IMPORTS.discard(fullname)
        if not hooks and not timed:
            return None
        if not _AFTER_IMPORT and not _TIMED_IMPORTS:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run, start = spec.loader.exec_module, time.time()

        def exec_module(module):
            run(module)
            if timed:
                _event({"phase": "import", "module": fullname, "seconds": round(time.time() - start, 3)})
            for hook in hooks:
                try:
                    hook(module)
                except Exception as exc:  # a hook must never take the child down
                    _say(f"hook for {fullname} not installed: {exc!r}")

        spec.loader.exec_module = exec_module
        return spec


if _AFTER_IMPORT or _TIMED_IMPORTS:
    sys.meta_path.insert(0, _AfterImport())


def _chain_next_sitecustomize():
    """Run the next `sitecustomize` on sys.path, which this file shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})  # noqa: S102
            return


_chain_next_sitecustomize()
