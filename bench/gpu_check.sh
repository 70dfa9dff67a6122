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
#   3. end to end on CUDA, when device_data/ was carried: pretrain (bf16, --compile) on prepared
#      State of the Union data, fine-tune SST-2 on the result, evaluate it;
#   4. the pretraining cases with --compile (bertkit compiled; transformers eager and compiled).
# Each bench run rewrites its JSON after every case, so a timeout keeps the finished cases.
#
# ../shared does not travel to the device; build the git-ignored device_data/ here first (8 MB):
#   mkdir -p device_data/data/glue/{SST-2,MRPC} device_data/data/squad device_data/data/vocab/bert-base-uncased
#   cp ../shared/data/glue/SST-2/dev.tsv device_data/data/glue/SST-2/
#   head -2001 ../shared/data/glue/SST-2/train.tsv > device_data/data/glue/SST-2/train.tsv
#   cp ../shared/data/glue/MRPC/dev.tsv device_data/data/glue/MRPC/
#   cp ../shared/data/squad/dev-v1.1.json device_data/data/squad/
#   cp ../shared/data/vocab/bert-base-uncased/vocab.txt device_data/data/vocab/bert-base-uncased/
#   bertkit prepare --input ../shared/data/corpus/state-of-the-union --tokenizer device_data/data/vocab/bert-base-uncased \
#     --format nsp --max-seq-len 128 --out device_data/sotu-nsp128
# then: run(command="bash bench/gpu_check.sh", carry=["device_data"], timeout_s=600).
# SKIP_TESTS=1 and EAGER_CASES=a,b rerun parts only.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
# real dev-set lengths for the varlen cases, when carried (device_data/data/{glue,squad})
[ -d device_data/data ] && export BERTKIT_SHARED="$PWD/device_data"
PY="${PYTHON:-python3}"

{
  date -u
  nvidia-smi -L 2>&1
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "transformers", transformers.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== 1. fast-path and parity tests on CUDA"
[ -n "${SKIP_TESTS:-}" ] || timeout 100 "$PY" -m pytest tests/test_fastpaths.py tests/test_parity.py -q -p no:cacheprovider -rs \
  > "$OUT/pytest.log" 2>&1
echo "pytest exit $?"; tail -n 15 "$OUT/pytest.log"

EAGER=pretrain-base-s128-b256,pretrain-base-s512-b64,pretrain-large-s128-b128,pretrain-mini-s128-b32
EAGER=$EAGER,infer-base-s128,infer-varlen-sst2,infer-varlen-mrpc,infer-varlen-squad,data-masking
EAGER="${EAGER_CASES:-$EAGER}"  # to rerun some cases only
echo "== 2. benchmark, eager"
timeout 170 "$PY" -m bertkit.cli bench --device cuda --cases "$EAGER" --repeats 10 --warmup 3 \
  --json "$OUT/bench_cuda_eager.json" > "$OUT/bench_cuda_eager.log" 2>&1
echo "bench eager exit $?"; grep -v "Loading weights" "$OUT/bench_cuda_eager.log" | tail -n 14

if [ -d device_data/sotu-nsp128 ]; then
  echo "== 3. end to end on CUDA: pretrain (bf16, compiled), fine-tune, evaluate"
  D=device_data/data/glue/SST-2
  { timeout 90 "$PY" -m bertkit.cli pretrain --data device_data/sotu-nsp128 --preset mini --out /tmp/e2e-pt \
      --steps 200 --batch-size 128 --lr 1e-3 --precision bf16 --compile --device cuda --eval-every 100 \
      --log-every 25 --save-every 100
    echo "pretrain exit $?"
    timeout 40 "$PY" -m bertkit.cli finetune --model /tmp/e2e-pt/model --task sst2 --train $D/train.tsv \
      --dev $D/dev.tsv --out /tmp/e2e-ft --epochs 2 --batch-size 32 --lr 1e-4 --seeds 1 --precision bf16 \
      --device cuda --no-progress
    echo "finetune exit $?"
    timeout 15 "$PY" -m bertkit.cli evaluate --model /tmp/e2e-ft/model --task sst2 --data $D/dev.tsv --device cuda
    echo "evaluate exit $?"
    cp /tmp/e2e-pt/loss.png "$OUT/e2e_loss.png" 2>/dev/null
  } > "$OUT/e2e.log" 2>&1
  grep -E "exit|step +200|dev |accuracy|Error|error" "$OUT/e2e.log" | tail -n 12
fi

echo "== 4. benchmark, compiled (pretraining)"
timeout 190 "$PY" -m bertkit.cli bench --device cuda --compile \
  --cases pretrain-base-s128-b256,pretrain-large-s128-b128,pretrain-base-s512-b64 --repeats 10 --warmup 3 \
  --json "$OUT/bench_cuda_compiled.json" > "$OUT/bench_cuda_compiled.log" 2>&1
echo "bench compiled exit $?"; grep -v "Loading weights" "$OUT/bench_cuda_compiled.log" | tail -n 8

