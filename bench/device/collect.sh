#!/bin/bash
# On the lent machine: wait up to $1 seconds for bench/device/gpu-work.sh to finish (or for $2, a file it
# writes, to appear), then put what it has produced so far under $OUT (logs, manifests, JSON, plots; no
# weights) and print the progress log.
set -u
W=/tmp/work
# a machine without gpu-work.sh's progress log 30 s on is a fresh one (the last was given back): say so
# then instead of waiting out the deadline
for _ in $(seq 30); do [ -e "$W/progress.log" ] && break; sleep 1; done
[ -e "$W/progress.log" ] || { echo "no GPU work on this machine (a fresh one: the last was given back)"; exit 3; }
deadline=$((SECONDS + ${1:-500}))
until [ -e "$W/DONE" ] || { [ -n "${2:-}" ] && [ -e "$W/$2" ]; } || [ $SECONDS -ge $deadline ]; do sleep 5; done
cat "$W/progress.log" 2>/dev/null
mkdir -p "$OUT"
for f in countdown-throughput.json countdown-throughput.md countdown-throughput.png; do cp "$W/bench/$f" "$OUT/" 2>/dev/null; done
cp "$W/calib/colocate-measurements.json" "$W/memory-calibration.json" "$W/memory_coefficients.json" "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/work.tar.gz" --exclude='models' --exclude='qtok' --exclude='*-cache' --exclude='*-vllm' --exclude='completions.jsonl' --exclude='tokenizer.json' \
  --exclude='*.safetensors' --exclude='*.pt' --exclude='*.pth' --exclude='*.bin' --exclude='optimizer*' . 2>/dev/null
ls -la "$OUT"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
