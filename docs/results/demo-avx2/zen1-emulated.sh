#!/usr/bin/env bash
# bertkit demo with defaults on an emulated 2-core Zen 1 beside one CPU-bound process: AVX2 kernels and
# fp32, and every process (the demo, its side process, the busy one) in a cgroup capped at 0.7 of a
# core in all: a Zen 1 core runs the demo's tiny step at ~0.35x this Zen 4 core held to AVX2.
cd "$(git rev-parse --show-toplevel)"
name=${1:-zen1-emulated}
mkdir -p scratch/demo-runs
out=scratch/demo-runs/$name
rm -rf "$out"
g=/sys/fs/cgroup/cpu/zen1
mkdir -p $g
echo 100000 > $g/cpu.cfs_period_us
echo 70000 > $g/cpu.cfs_quota_us
echo $$ > $g/cgroup.procs
python3 -c "while True: pass" &
busy=$!
sleep 70   # the load average sees the busy process, as a user's machine would
start=$(date +%s)
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
  .venv/bin/bertkit demo --out "$out" > scratch/demo-runs/$name.log 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> scratch/demo-runs/$name.log
kill $busy
