#!/usr/bin/env bash
# the AVX2 one-shared-core demo with another narrow shape (JSON overrides in $2)
cd "$(git rev-parse --show-toplevel)"
name=$1; overrides=$2
mkdir -p scratch/demo-runs
out=scratch/demo-runs/$name
rm -rf "$out"
taskset -c 0 python3 -c "while True: pass" &
busy=$!
start=$(date +%s)
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 taskset -c 0 \
  .venv/bin/python -c "
import json, sys
import bertkit.demo.plan as plan
plan.NARROW = json.loads(sys.argv[1])
from bertkit.cli import main
sys.exit(main(['demo', '--out', sys.argv[2]]))
" "$overrides" "$out" > scratch/demo-runs/$name.log 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> scratch/demo-runs/$name.log
kill $busy
