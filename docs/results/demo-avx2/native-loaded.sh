#!/usr/bin/env bash
# bertkit demo with defaults on this 2-core bf16 machine beside one CPU-bound process
cd "$(git rev-parse --show-toplevel)"
name=${1:-native-loaded}
mkdir -p scratch/demo-runs
out=scratch/demo-runs/$name
rm -rf "$out"
python3 -c "while True: pass" &
busy=$!
sleep 70
start=$(date +%s)
.venv/bin/bertkit demo --out "$out" > scratch/demo-runs/$name.log 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> scratch/demo-runs/$name.log
kill $busy
