#!/bin/bash
# On the lent 2 x H200 machine: memory calibration runs (bench/calibrate_memory.py) for the planner, and
# beside them a 2-process full fine-tuning GRPO run with NCCL_P2P_DISABLE=1 forced and DeepSpeed ZeRO-2.
# bench/make_random_model.py pads the small tokenizer in .device/tok to the model's 151936 ids.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1
mkdir -p /tmp/work && cd "$(dirname "$0")/../.."
save() { cp /tmp/work/calibration/memory-calibration.json "$OUT/" 2>/dev/null
  tar -C /tmp/work -czf "$OUT/phase-b.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.pth' --exclude='*.bin' --exclude='tokenizer.json' . 2>/dev/null; ls -la "$OUT"; }
trap save EXIT
python3 -m entrypoint doctor > /tmp/work/doctor.txt 2>&1
python3 bench/make_random_model.py Qwen/Qwen2.5-0.5B-Instruct /tmp/models/q05 --tokenizer .device/tok 2>&1 | tail -1 &
python3 bench/make_random_model.py Qwen/Qwen2.5-1.5B-Instruct /tmp/models/q15 --tokenizer .device/tok 2>&1 | tail -1 &
wait
(python3 -m entrypoint train recipe=bench/recipes/random-qwen-hf.env MODEL=/tmp/models/q05 OUTPUT_DIR=/tmp/work/runs RUN_NAME=zero2-p2p-off \
  TRAIN_GPUS=0,1 NCCL_P2P_DISABLE=1 DEEPSPEED=zero2 TRAIN_TYPE=full PER_DEVICE_TRAIN_BATCH_SIZE=4 GRADIENT_ACCUMULATION_STEPS=1 NUM_GENERATIONS=4 \
  MAX_COMPLETION_LENGTH=128 MAX_STEPS=3 NCCL_DEBUG=INFO > /tmp/work/zero2.log 2>&1; echo "zero2 rc=$?" >> /tmp/work/zero2.log) &
python3 bench/calibrate_memory.py --models /tmp/models --out /tmp/work/calibration --gpus 0,1 --steps 2 --deadline "${DEADLINE:-300}" \
  --only q05-lora-g8-c256,q05-lora-g8-c1024,q05-full-g8-c256,q05-full-g2-c1024,q05-lora-g8-c256-nogc,q15-lora-g8-c256,q15-lora-g2-c1024,q15-full-g2-c256,q15-full-g8-c1024 2>&1 | tail -10
wait
tail -1 /tmp/work/zero2.log; grep -E "NCCL_P2P_DISABLE|via SHM|run (completed|failed)" /tmp/work/zero2.log | head -6
