#!/usr/bin/env bash
# bertkit demo with defaults, AVX-512 and bf16 unavailable (AVX2 kernels, fp32), on one core that a
# CPU-bound process shares with it.
cd "$(git rev-parse --show-toplevel)"
name=${1:-avx2-one-core}
mkdir -p scratch/demo-runs
out=scratch/demo-runs/$name
rm -rf "$out"
taskset -c 0 python3 -c "while True: pass" &
busy=$!
lscpu | grep -E "Model name|Flags" > scratch/demo-runs/$name.lscpu
start=$(date +%s)
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 taskset -c 0 \
  .venv/bin/bertkit demo --out "$out" > scratch/demo-runs/$name.log 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> scratch/demo-runs/$name.log
kill $busy
