#!/usr/bin/env bash
# The GPU half of the performance work, in one call on a CUDA machine, sized for an H200 lease:
# at most ~9 minutes of wall time (give the call timeout_s 600), each part under its own timeout
# so that a slow part cannot eat the rest.
#
#   run (device tool):  bash bench/gpu_check.sh            # writes to $OUT (default bench/out)
#
# Builds nothing: runs from src/ with the machine's python3 (torch + transformers preinstalled).
#   1. the fast-path tests (tests/test_fastpaths.py: unpadded varlen kernel, fused AdamW, masking
#      on CUDA) and the parity tests, on CUDA;
#   2. every CUDA benchmark case, eager, bf16 autocast, fused AdamW;
#   3. the pretraining cases with --compile (bertkit compiled; transformers eager and compiled).
# Each bench run rewrites its JSON after every case, so a timeout keeps the finished cases.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python3}"

{
  date -u
  nvidia-smi -L 2>&1
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "transformers", transformers.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== 1. fast-path and parity tests on CUDA"
timeout 120 "$PY" -m pytest tests/test_fastpaths.py tests/test_parity.py -q -p no:cacheprovider -rs \
  > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; tail -n 15 "$OUT/pytest.log"

EAGER=pretrain-base-s128-b256,pretrain-base-s512-b64,pretrain-large-s128-b128,pretrain-mini-s128-b32
EAGER=$EAGER,infer-base-s128,infer-varlen-sst2,infer-varlen-mrpc,infer-varlen-squad,data-masking
echo "== 2. benchmark, eager"
timeout 170 "$PY" -m bertkit.cli bench --device cuda --cases "$EAGER" --repeats 10 --warmup 3 \
  --json "$OUT/bench_cuda_eager.json" > "$OUT/bench_cuda_eager.log" 2>&1
echo "bench eager exit $?"; grep -v "Loading weights" "$OUT/bench_cuda_eager.log" | tail -n 14

echo "== 3. benchmark, compiled (pretraining)"
timeout 240 "$PY" -m bertkit.cli bench --device cuda --compile \
  --cases pretrain-base-s128-b256,pretrain-large-s128-b128,pretrain-base-s512-b64 --repeats 10 --warmup 3 \
  --json "$OUT/bench_cuda_compiled.json" > "$OUT/bench_cuda_compiled.log" 2>&1
echo "bench compiled exit $?"; grep -v "Loading weights" "$OUT/bench_cuda_compiled.log" | tail -n 8
