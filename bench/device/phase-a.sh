#!/bin/bash
# On the lent 2 x H200 machine (no network, Python 3.12 with its own torch): real NVML doctor, the
# single-card throughput benchmark (seed vs shipped recipe, side by side on the two GPUs), and a
# 2-process GRPO run with NCCL_P2P_DISABLE=1 forced and DeepSpeed ZeRO-2 through the entrypoint.
# The ZeRO-2 run is full fine-tuning: the LoRA one failed there in the lr scheduler (a strict zip over the
# optimizer's parameter groups, probably the empty no-decay group) with the lent machine's torch 2.11, not the image's 2.6.
# Expects: wheels installed on PYTHONPATH (bench/device/README.md), the tokenizer in .device/tok, $OUT.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1
mkdir -p /tmp/work && cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee /tmp/work/nvidia-smi.txt
python3 -m entrypoint doctor --save-inventory /tmp/work/inventory-h200.json > /tmp/work/doctor.txt 2>&1; echo "doctor rc=$?"; cat /tmp/work/doctor.txt
python3 bench/make_random_model.py Qwen/Qwen2.5-0.5B-Instruct /tmp/models/q05 --tokenizer .device/tok 2>&1 | tail -1
python3 bench/countdown_throughput.py --models /tmp/models --out /tmp/work/bench --gpus 0,1 --steps 6 --warmup 2 2>&1 | grep -v -E "^\s*$" | tail -4
python3 -m entrypoint train recipe=bench/recipes/random-qwen-hf.env MODEL=/tmp/models/q05 OUTPUT_DIR=/tmp/work/runs RUN_NAME=zero2-p2p-off \
  TRAIN_GPUS=0,1 NCCL_P2P_DISABLE=1 DEEPSPEED=zero2 TRAIN_TYPE=full PER_DEVICE_TRAIN_BATCH_SIZE=4 GRADIENT_ACCUMULATION_STEPS=1 NUM_GENERATIONS=4 \
  MAX_COMPLETION_LENGTH=128 MAX_STEPS=3 NCCL_DEBUG=INFO > /tmp/work/zero2.log 2>&1; echo "zero2 rc=$?"
grep -E "NCCL_P2P_DISABLE|NCCL INFO (Channel|Using|P2P|SHM)|run (completed|failed)|global_step" /tmp/work/zero2.log | head -30
tar -C /tmp/work -czf "$OUT/phase-a.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.pth' --exclude='*.bin' .
cp /tmp/work/bench/countdown-throughput.{json,md,png} "$OUT/" 2>/dev/null
ls -la "$OUT"
