#!/bin/bash
# On the lent 2 x H200 machine: memory calibration runs (bench/calibrate_memory.py) for the planner.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1
mkdir -p /tmp/work && cd "$(dirname "$0")/../.."
for m in "Qwen/Qwen2.5-0.5B-Instruct q05" "Qwen/Qwen2.5-1.5B-Instruct q15"; do
  set -- $m; [ -d /tmp/models/$2 ] || python3 bench/make_random_model.py "$1" /tmp/models/$2 --tokenizer .device/tok 2>&1 | tail -1
done
python3 bench/calibrate_memory.py --models /tmp/models --out /tmp/work/calibration --gpus 0,1 --steps 2 ${ONLY:+--only $ONLY} 2>&1 | tail -14
cp /tmp/work/calibration/memory-calibration.json "$OUT/" 2>/dev/null
tar -C /tmp/work -czf "$OUT/phase-b.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.pth' --exclude='*.bin' calibration
ls -la "$OUT"
