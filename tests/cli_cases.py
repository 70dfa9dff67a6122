"""The rows of tests/test_cli_contract.py: one user mistake per `Case`, for every command.

`$name` in a row's argv stands for a shared input built by that test module's `fixtures`
fixture; `files` is what the case's folder held before the command ran.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field

from pretrain_helpers import TINY


@dataclass(frozen=True)
class Case:
    argv: str  # as typed after `bertkit`; $name is a shared input's path (or flags) from `fixtures`
    expect: str  # in the one stderr line: the flag, or the file (and line), at fault
    files: dict = field(default_factory=dict)  # path in the case's folder -> str or bytes content
    copy: tuple[str, ...] = ()  # fixture folders copied into the case's folder (an existing run)

    @property
    def command(self) -> str:
        return self.argv.split()[0]


class Evil:
    """Unpickling this runs `touch PWNED` in the case's folder, which the snapshot would show."""

    def __reduce__(self):
        return (os.system, ("touch PWNED",))


BINARY = random.Random(0).randbytes(200_000)
NUL = b"\0" * 4096
CONTROL = "".join(map(chr, range(1, 9))) * 512
LATIN1 = "fine\ncaf\xe9\n".encode("latin-1")
SST2_BAD_ROW = "sentence\tlabel\nonly one column\n"
BAD_CONFIG = {"m/config.json": json.dumps({**TINY, "vocab_size": 99, "hidden_size": "128"})}

FT = "finetune --model $tiny --task sst2 --train $train --dev $dev --out out --seeds 1 --epochs 1 --no-progress"
EMB = ("finetune --model $tiny --task embedding --train $pairs --dev $pairs --out out --seeds 1 --epochs 1 "
       "--no-progress")
RR = EMB.replace("embedding", "rerank")
PT = "pretrain --data $data --out run $tiny_flags --steps 2 --eval-samples 0"
PR = "prepare --input $corpus --tokenizer $tok --out data --workers 1"
TT = "tokenizer train --input $corpus --vocab-size 60 --out tok"
EM = "embed --model $tiny --input $text --pooling cls --out out.npy"
FE = "features --model $tiny --input $text --out out.npz --layers -1"
EV = "evaluate --model $tiny --task sst2 --data $dev"
DI = "distill --teacher $tiny --task sst2 --student-preset teacher --train $train --dev $dev --out out --no-progress"
SQ = "score --task squad --gold $squad --pred pred.json"
IX = "index --model $tiny --input $text --out idx --no-progress"
SE = "search --index $index 'a film'"
SV = "serve --model $tiny --port 0"
EX = "export --model $tiny --format onnx --out ex"
TU = "tune --model $tiny --task sst2 --train $train --dev $dev --out st --trials 2 --no-progress"
DUPS = '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n'

CASES = [
    Case("nosuch", "unknown command 'nosuch'"),
    # finetune: the rows, then ranges, types, paths, layouts, outputs
    Case(f"{FT} --lr -1", "argument --lr"),
    Case(f"{FT} --warmup -5", "argument --warmup"),
    Case(FT, "out: is a file", {"out": "not a folder"}),
    Case(FT, "out: holds a previous fine-tuning result; pass --overwrite", {"out/results.json": "{}"}),
    Case(f"{FT} --overwrite", "out: is a folder of other files", {"out/notes.txt": "mine"}),
    Case(FT.replace("$tiny", "m"), "m/config.json: bad model config: expected a JSON object",
         {"m/config.json": "[1,2,3]"}),
    Case(FT.replace("$tiny", "m"), "m/config.json: bad model config: no vocab_size", {"m/config.json": "{}"}),
    Case(FT.replace("$tiny", "m"), "m/config.json: bad model config: hidden_size must be an integer", BAD_CONFIG),
    Case(FT.replace("$tiny", "$evil"), "pytorch_model.bin: cannot read weights safely"),
    Case(f"{FT} --lr nan", "argument --lr"),
    Case(f"{FT} --epochs 0", "argument --epochs"),
    Case(f"{FT} --epochs two", "argument --epochs"),
    Case(f"{FT} --batch-size 0", "argument --batch-size"),
    Case(f"{FT} --max-seq-len 4", "argument --max-seq-len"),
    Case(f"{FT} --max-seq-len 512", "--max-seq-len 512 exceeds the model's 128 positions"),
    Case(f"{FT} --seeds 1,x", "argument --seeds"),
    Case(f"{FT} --seeds 1,1", "argument --seeds"),
    Case(f"{FT} --weight-decay -0.1", "argument --weight-decay"),
    Case(f"{FT} --max-train-examples 0", "argument --max-train-examples"),
    Case(f"{FT} --device gpu", "argument --device"),
    Case(FT.replace("sst2", "nosuch"), "argument --task"),
    Case(FT.replace("--model $tiny", ""), "required: --model"),
    Case(FT.replace("$train", "nope.tsv"), "argument --train: nope.tsv: no such file"),
    Case(FT.replace("$train", "empty.tsv"), "empty.tsv: empty file", {"empty.tsv": ""}),
    Case(FT.replace("$train", "nul.tsv"), "nul.tsv:1: not text", {"nul.tsv": NUL}),
    Case(FT.replace("$train", "bad.tsv"), "bad.tsv:2:", {"bad.tsv": SST2_BAD_ROW}),
    Case(FT.replace("--dev $dev", ""), "--dev is required"),
    Case(f"{FT} --feature-based", "--feature-based applies to --task ner only"),
    Case(f"{FT} --split-articles 2", "--split-articles applies to --task squad only"),
    Case(f"{FT} --layers -1", "--layers applies to --feature-based only"),
    Case(f"{FT} --max-grad-norm -1", "argument --max-grad-norm"),
    Case(f"{FT} --max-grad-norm inf", "argument --max-grad-norm"),
    Case(f"{FT} --classifier-dropout 1", "argument --classifier-dropout"),
    Case(f"{FT} --classifier-dropout x", "argument --classifier-dropout"),
    Case(f"{FT.replace('--task sst2', '--task squad')} --classifier-dropout 0.2", "--classifier-dropout applies to"),
    Case(f"{FT} --eval-every 0", "argument --eval-every"),
    Case(f"{FT} --eval-every 2.5", "argument --eval-every"),
    Case(f"{FT} --early-stopping 0", "argument --early-stopping"),
    Case(f"{FT} --metric-for-best mcc", "--metric-for-best mcc: this task's evaluations report"),
    Case(f"{FT} --threshold 0.5", "--threshold applies to --task multilabel only"),
    Case(f"{FT} --label-separator ;", "--label-separator applies to --task multilabel only"),
    Case(f"{FT} --pos-weight 2", "--pos-weight applies to --task multilabel or rerank only"),
    Case(f"{FT} --class-weights nope.json", "argument --class-weights: nope.json: no such file"),
    Case(f"{FT} --class-weights w.json", "w.json: class weights must name each label (0, 1): missing 1",
         {"w.json": '{"0": 2}'}),
    Case(f"{FT.replace('sst2', 'ner').replace('$train', '$conll').replace('$dev', '$conll')} --feature-based "
         "--class-weights balanced", "--class-weights applies to fine-tuning, not the --feature-based tagger"),
    Case(f"{FT.replace('sst2', 'multilabel')} --text-columns sentence --label-column label --threshold 1",
         "argument --threshold"),
    Case(FT.replace("--out out", "--out f/out"), "cannot create it: f is a file", {"f": "x"}),
    # finetune --long-inputs
    Case(f"{FT} --long-inputs chunks", "argument --long-inputs: invalid choice"),
    Case(f"{FT} --long-inputs windows --window-stride 0", "argument --window-stride"),
    Case(f"{FT} --window-stride 8", "--window-stride applies to --long-inputs windows"),
    Case(f"{FT} --aggregate max", "--aggregate applies to --long-inputs windows"),
    Case(f"{FT} --long-inputs windows --aggregate median", "argument --aggregate: invalid choice"),
    Case(f"{FT.replace('--task sst2', '--task squad')} --long-inputs windows", "--long-inputs applies to --task"),
    Case(f"{FT.replace('sst2', 'ner').replace('$train', '$conll').replace('$dev', '$conll')} --long-inputs windows "
         "--aggregate max", "--aggregate applies to --task"),
    Case(f"{FT.replace('sst2', 'ner').replace('$train', '$conll').replace('$dev', '$conll')} --feature-based "
         "--long-inputs windows", "the --feature-based tagger reads sentences cut to --max-seq-len"),
    Case(f"{FT} --long-inputs windows --max-seq-len 16 --window-stride 15",
         "--window-stride 15 is longer than a window (14 tokens)"),
    # finetune --task embedding / rerank
    Case(f"{FT} --pooling mean", "--pooling applies to --task embedding only"),
    Case(f"{FT} --grad-cache 4", "--grad-cache applies to --task embedding only"),
    Case(f"{FT} --loss bce", "--loss bce applies to --task rerank only"),
    Case(f"{EMB} --loss listwise", "--loss listwise applies to --task rerank only"),
    Case(f"{EMB} --symmetric --loss cosent", "--symmetric applies to the contrastive loss, not cosent"),
    Case(f"{RR} --loss listwise --pos-weight 3", "--pos-weight applies to --task rerank with --loss bce only"),
    Case(f"{EMB} --temperature 0", "argument --temperature"),
    Case(f"{EMB} --grad-cache 0", "argument --grad-cache"),
    Case(f"{EMB} --matryoshka-dims 8,x", "argument --matryoshka-dims"),
    Case(f"{EMB} --matryoshka-dims 64", "--matryoshka-dims 64 exceeds the model's width 32"),
    Case(f"{EMB} --classifier-dropout 0.2", "--classifier-dropout applies to"),
    Case(f"{EMB} --loss cosent", "--loss cosent needs a score on every training row"),
    Case(EMB.replace("$pairs", "$train"), "train.tsv:1: the header names no anchor / query / sentence1 column"),
    Case(RR.replace("--dev $pairs", "--dev d.tsv"), "rerank evaluation rows need negatives",
         {"d.tsv": "query\tpositive\nq\tp\n"}),
    Case(EMB.replace("$pairs", "p.jsonl"), 'p.jsonl:1: expected an object with "anchor" and "positive"',
         {"p.jsonl": '{"anchor": "x"}\n'}),
    Case(EMB.replace("$pairs", "s.tsv"), "s.tsv:2: score 'x' is not a number",
         {"s.tsv": "anchor\tpositive\tscore\na\tb\tx\n"}),
    # --report-to (pretrain, finetune, distill, ablate)
    Case(f"{FT} --report-to wandb", "argument --report-to: invalid choice: 'wandb'"),
    Case(f"{PT} --report-to wandb", "argument --report-to: invalid choice: 'wandb'"),
    Case(f"{DI} --report-to wandb", "argument --report-to: invalid choice: 'wandb'"),
    Case("ablate --out abl --report-to wandb", "argument --report-to: invalid choice: 'wandb'"),
    # tune: finetune's flags and checks, its own flags, the study folder
    Case(f"{TU} --trials 0", "argument --trials"),
    Case(TU.replace("--trials 2", ""), "required: --trials"),
    Case(f"{TU} --timeout 0", "argument --timeout"),
    Case(f"{TU} --search lr=1e-3:1e-5", "argument --search: 'lr=1e-3:1e-5': LOW must be below HIGH"),
    Case(f"{TU} --search momentum=0:1", "argument --search: 'momentum=0:1': expected NAME=SPEC"),
    Case(f"{TU} --search lr=0:1:log", "argument --search: 'lr=0:1:log': lr must be above 0"),
    Case(f"{TU} --search epochs=1.5:3", "argument --search: 'epochs=1.5:3': expected whole numbers"),
    Case(f"{TU} --lr 1e-4 --search lr=1e-5:1e-3", "--lr fixes lr; --search names it too"),
    Case(f"{TU} --epochs 0", "argument --epochs"),
    Case(f"{TU} --seeds 1,2", "--seeds: a trial trains one seed"),
    Case(f"{TU} --report-to tensorboard", "--report-to tensorboard applies to bertkit finetune"),
    Case(f"{TU} --prune-warmup -1", "argument --prune-warmup"),
    Case(f"{TU} --feature-based", "--feature-based applies to --task ner only"),
    Case(f"{TU} --metric-for-best mcc", "--metric-for-best mcc: this task's evaluations report"),
    Case(TU, "st: is a folder of other files, not a previous study", {"st/notes.txt": "mine"}),
    Case(TU, "st: is a file", {"st": "not a folder"}),
    Case(TU, "st/study.db: not an Optuna study database", {"st/study.db": "not sqlite"}),
    # distill
    Case(f"{DI} --temperature 0", "argument --temperature"),
    Case(DI.replace("teacher --train", "huge --train"), "argument --student-preset"),
    Case(f"{DI} --student $tiny", "argument --student: not allowed with argument --student-preset"),
    Case(DI.replace("--student-preset teacher", ""), "one of the arguments --student-preset --student is required"),
    Case(DI.replace("--dev $dev", ""), "--dev is required for --task sst2"),
    Case(f"{DI} --student-layers 0", "argument --student-layers"),
    Case(f"{DI} --teacher-layers 0,1", "argument --teacher-layers"),
    Case(f"{DI} --pooling cls", "--pooling applies to --task embedding only"),
    Case(DI.replace("$train", "$train $dev"), "give --train one path"),
    Case(DI, "out: holds a previous distillation result; pass --overwrite", {"out/distill.json": "{}"}),
    Case(DI, "model has no trained BertForSequenceClassification head"),
    # pretrain
    Case(f"{PT} --lr -1", "argument --lr"),
    Case(f"{PT} --config-json '{{\"num_hidden_layers\": 0}}'", "--config-json: bad model config: num_hidden_layers"),
    Case(f"{PT} --config-json '[1,2,3]'", "argument --config-json: the text is a JSON list"),
    Case(f"{PT} --config-json '{{bad'", "argument --config-json: the text is not valid JSON"),
    Case(f"{PT} --config-json '{{\"foo\": 1}}'", "--config-json: unknown model config field(s) foo"),
    Case(f"{PT} --config-json '{{\"hidden_size\": \"128\"}}'", "--config-json: bad model config: hidden_size"),
    Case(f"{PT} --config-json nope.json", "argument --config-json: neither a JSON object nor a file"),
    Case(f"{PT} --steps 0", "argument --steps"),
    Case(f"{PT} --recipe fast", "argument --recipe: invalid choice: 'fast'"),
    Case(f"{PT} --dropout 1", "argument --dropout: must be in [0, 1)"),
    Case(f"{PT} --resume --recipe budget", "recipe 'paper' -> 'budget'", copy=("run",)),
    Case(f"{PT} --minutes 1", "argument --minutes: not allowed with argument --steps"),
    Case(f"{PT} --mask-rate 1.5", "argument --mask-rate"),
    Case(f"{PT} --mask-rule 50/50", "argument --mask-rule"),
    Case(f"{PT} --seed -1", "argument --seed"),
    Case(f"{PT} --keep -1", "argument --keep"),
    Case(f"{PT} --batch-size x", "argument --batch-size"),
    Case(f"{PT} --preset huge", "argument --preset: unknown preset 'huge'"),
    Case(f"{PT} --device tpu", "argument --device"),
    Case(PT.replace("$data", "nowhere"), "argument --data: nowhere: no such folder"),
    Case(PT.replace("$data", "$tiny"), "no manifest.json"),
    Case(PT.replace("$data", "$packed"), "--objective mlm"),
    Case(f"{PT} --batch-size 12 --grad-accum 5", "--batch-size 12 must be divisible"),
    Case(f"{PT} --tokenizer .", "argument --tokenizer: .: no vocab.txt or tokenizer.json"),
    Case(PT, "run: exists and is not a folder", {"run": "a file"}),
    Case(PT, "run: run folder exists; pass --resume to continue it, --overwrite", copy=("run",)),
    Case(f"{PT} --overwrite", "run: is a folder of other files, not a previous run", {"run/notes.txt": "mine"}),
    Case(f"{PT} --resume --overwrite", "--resume continues a run and --overwrite starts it again", copy=("run",)),
    Case(f"{PT} --resume --preset mini".replace("$tiny_flags", "--batch-size 13 --lr 2e-3"),
         "model shape from --preset/--config-json (hidden_size 32 -> 256", copy=("run",)),
    Case(f"{PT} --resume --objective mlm", "objective 'mlm+nsp' -> 'mlm'", copy=("run",)),
    Case(f"{PT} --resume --objective mlm".replace("$data", "$packed"), "data (another prepared corpus", copy=("run",)),
    Case(f"{PT} --objective electra --generator-width 0", "argument --generator-width"),
    Case(f"{PT} --objective electra --generator-width 2", "argument --generator-width"),
    Case(f"{PT} --objective electra --rtd-weight -1", "argument --rtd-weight"),
    Case(f"{PT} --generator-width 0.25", "--generator-width applies to --objective electra only"),
    Case(f"{PT} --objective mlm --rtd-weight 10", "--rtd-weight applies to --objective electra only"),
    Case(f"{PT} --objective electra --generator-width 0.99", "would be as wide as the discriminator (32)"),
    Case(f"{PT} --resume --objective electra", "objective 'mlm+nsp' -> 'electra'", copy=("run",)),
    Case(f"{PT} --init-from $tiny", "--config-json does not apply with --init-from"),
    Case("pretrain --data $data --out run --init-from nowhere --steps 2", "argument --init-from: nowhere: no such"),
    Case("pretrain --data $data --out run --init-from $tiny --objective ltr --steps 2", "--init-from continues a bidi"),
    Case("pretrain --data $data --out run --init-from $tiny --steps 2 --eval-samples 0",
         "was prepared with another vocabulary"),
    # prepare
    Case(PR, "data: holds a previous prepared data folder; pass --overwrite", {"data/manifest.json": "{}"}),
    Case(PR, "data: is a file", {"data": "a file"}),
    Case(PR.replace("$corpus", "nope.txt"), "argument --input: nope.txt: no such file or folder"),
    Case(PR.replace("$corpus", "bin.txt"), "bin.txt:1: not valid UTF-8", {"bin.txt": BINARY}),
    Case(PR.replace("$corpus", "nul.txt"), "nul.txt:1: not text: holds NUL bytes", {"nul.txt": NUL}),
    Case(PR.replace("$corpus", "ctl.txt"), "ctl.txt: not text", {"ctl.txt": CONTROL}),
    Case(PR.replace("$corpus", "empty.txt"), "empty.txt: empty file", {"empty.txt": ""}),
    Case(PR.replace("$corpus", "docs"), "docs: folder holds no", {"docs/readme.md": "# no text files"}),
    Case(PR.replace("$tok", "nowhere"), "argument --tokenizer: nowhere: no such folder"),
    Case(PR.replace("$tok", "."), "argument --tokenizer: .: no vocab.txt or tokenizer.json"),
    Case(f"{PR} --max-seq-len 4", "argument --max-seq-len"),
    Case(f"{PR} --val-fraction 1", "argument --val-fraction"),
    Case(f"{PR} --format bert", "argument --format"),
    Case(f"{PR} --workers 0", "argument --workers"),
    # tokenizer train
    Case(TT, "tok: holds a previous vocabulary; pass --overwrite", {"tok/vocab.txt": "[PAD]\n"}),
    Case(TT, "tok: is a file", {"tok": "a file"}),
    Case(TT.replace("$corpus", "bin.txt"), "bin.txt:1: not valid UTF-8", {"bin.txt": BINARY}),
    Case(TT.replace("$corpus", "nul.txt"), "nul.txt:1: not text: holds NUL bytes", {"nul.txt": NUL}),
    Case(TT.replace("$corpus", "ctl.txt"), "ctl.txt: not text", {"ctl.txt": CONTROL}),
    Case(TT.replace("$corpus", "empty.txt"), "empty.txt: empty file", {"empty.txt": ""}),
    Case(TT.replace("$corpus", "nope"), "argument --input: nope: no such file or folder"),
    Case(TT.replace("60", "3"), "argument --vocab-size: must be at least 6"),
    Case(TT.replace("60", "many"), "argument --vocab-size"),
    Case(TT.replace("--vocab-size 60", ""), "required: --vocab-size"),
    Case(f"{TT} --min-frequency 0", "argument --min-frequency"),
    Case("tokenizer", "required: ACTION"),
    # tokenize
    Case("tokenize --model $tiny hello --max-length 1", "argument --max-length"),
    Case("tokenize --model nowhere hello", "argument --model: nowhere: no such folder"),
    Case("tokenize --model . hello", "argument --model: .: no vocab.txt or tokenizer.json"),
    # embed
    Case(EM, "out.npy: exists; pass --overwrite", {"out.npy": "old vectors"}),
    Case(f"{EM} --overwrite", "out.npy: is a folder", {"out.npy/keep.txt": "mine"}),
    Case(EM.replace("$text", "nope.txt"), "argument --input: nope.txt: no such file"),
    Case(EM.replace("$text", "empty.txt"), "empty.txt: empty file", {"empty.txt": ""}),
    Case(EM.replace("$text", "blank.txt"), "blank.txt:2: blank line", {"blank.txt": "one\n\nthree\n"}),
    Case(EM.replace("$text", "nul.txt"), "nul.txt:1: not text", {"nul.txt": NUL}),
    Case(EM.replace("$text", "latin1.txt"), "latin1.txt:2: not valid UTF-8", {"latin1.txt": LATIN1}),
    Case(f"{EM} --layers 99", "layer 99 does not exist"),
    Case(f"{EM} --int8 --precision bf16", "--precision bf16 runs torch models in bf16: not with --int8"),
    Case(f"{EM} --precision fp16", "argument --precision"),
    Case(f"{EM} --layers a,b", "argument --layers"),
    Case(f"{EM} --batch-size 0", "argument --batch-size"),
    Case(f"{EM} --max-length 2", "argument --max-length"),
    Case(EM.replace("cls", "sum"), "argument --pooling"),
    Case(EM.replace("$tiny", "."), "argument --model: .: no config.json"),
    Case(f"{EM} --long-inputs windows --window-stride x", "argument --window-stride"),
    Case(f"{EM} --window-stride 4", "--window-stride applies to --long-inputs windows"),
    Case(f"{EM} --long-inputs whole", "argument --long-inputs: invalid choice"),
    # features
    Case(FE.replace("out.npz", "out.npy"), "out.npy: output must end in .npz"),
    Case(FE, "out.npz: exists; pass --overwrite", {"out.npz": "old features"}),
    Case(f"{FE} --layers x", "argument --layers"),
    Case(f"{FE} --max-length 1000", "argument --max-length"),
    Case(f"{FE} --combine mean", "argument --combine"),
    Case(FE.replace("$text", "latin1.txt"), "latin1.txt:2: not valid UTF-8", {"latin1.txt": LATIN1}),
    Case(f"{FE} --window-stride 4", "--window-stride applies to --long-inputs windows"),
    Case(f"{FE} --long-inputs windows --max-length 8 --window-stride 7",
         "--window-stride 7 is longer than a window (6 tokens)"),
    # evaluate
    Case(f"{EV} --out pred.tsv", "pred.tsv: exists; pass --overwrite", {"pred.tsv": "old"}),
    Case(EV.replace("$dev", "nope.tsv"), "argument --data: nope.tsv: no such file"),
    Case(f"{EV} --batch-size 0", "argument --batch-size"),
    Case(EV, "model has no trained BertForSequenceClassification head"),
    Case(f"{EV} --zero-shot --out x.tsv", "--zero-shot writes no predictions"),
    Case(f"{EV} --best-chunk", "--best-chunk applies to --task retrieval only"),
    Case(f"{EV} --long-inputs truncate --window-stride 4", "--window-stride applies to --long-inputs windows"),
    Case(f"{EV} --aggregate max", "--window-stride and --aggregate apply to windows, and this model was fine-tuned"),
    Case(EV.replace("sst2", "squad").replace("$dev", "$squad") + " --long-inputs windows",
         "--long-inputs applies to classification, regression and ner tasks"),
    Case(f"{EV} --zero-shot --aggregate max", "--aggregate applies to classification and regression tasks"),
    # index, search
    Case(IX, "idx: holds a previous index; pass --overwrite", {"idx/meta.json": "{}"}),
    Case(IX, "idx: is a file", {"idx": "a file"}),
    Case(IX.replace("$text", "nope.txt"), "argument --input: nope.txt: no such file"),
    Case(IX.replace("$text", "dup.jsonl"), "dup.jsonl:2: id 'a' appears twice", {"dup.jsonl": DUPS}),
    Case(IX.replace("$text", "row.jsonl"), 'row.jsonl:1: expected an object with "_id"', {"row.jsonl": '{"_id": 1}\n'}),
    Case(IX.replace("$text", "empty.txt"), "empty.txt: no passages to index", {"empty.txt": "\n\n"}),
    Case(f"{IX} --dtype int4", "argument --dtype"),
    Case(f"{IX} --ann-threshold -1", "argument --ann-threshold"),
    Case(f"{IX} --chunk 1", "argument --chunk"),
    Case(f"{IX} --best-chunk --long-inputs truncate", "--best-chunk reads documents in windows: not with"),
    Case(f"{IX} --window-stride 0", "argument --window-stride"),
    Case(IX.replace("$tiny", "nowhere"), "argument --model: nowhere: no such"),
    Case("search --index nowhere q", "argument --index: nowhere: no such folder"),
    Case("search --index d q", "d: not a search index (no meta.json)", {"d/notes.txt": "mine"}),
    Case(f"{SE} -k 0", "argument -k/--top-k"),
    Case(f"{SE} --candidates 5", "--candidates applies to --rerank only"),
    Case(f"{SE} --rerank $tiny -k 5 --candidates 2", "--candidates 2 is fewer than -k 5"),
    Case(f"{SE} --rerank $tiny", "a reranker has one output (num_labels 1)"),
    # data, evaluate --task retrieval
    Case("data beir-squad --squad nope.json --out b", "argument --squad: nope.json: no such file"),
    Case("data beir-squad --squad $squad --out b", "b: holds a previous retrieval set; pass --overwrite",
         {"b/corpus.jsonl": "{}"}),
    Case("data", "required: ACTION"),
    Case("evaluate --task retrieval --bm25 --queries $text --corpus $text", "--task retrieval needs --qrels"),
    Case("evaluate --task retrieval --queries $text --corpus $text --qrels $text", "needs --model, --bm25 or both"),
    Case("evaluate --task retrieval --bm25 --queries $text --corpus $text --qrels $text --aggregate max",
         "--aggregate applies to classification and regression tasks (retrieval: --best-chunk)"),
    Case(f"{EV} --bm25", "--bm25 applies to --task retrieval only"),
    # score: the row (no id matches), then layouts and missing files
    Case(SQ, "pred.json: none of its 2 question ids", {"pred.json": '{"q1": "a", "q2": "b"}'}),
    Case(SQ, "pred.json: not a JSON predictions file", {"pred.json": "{not json"}),
    Case(SQ, "pred.json: expected a JSON object", {"pred.json": '["a", "b"]'}),
    Case(SQ, "pred.json: no predictions", {"pred.json": "{}"}),
    Case(SQ.replace("$squad", "nope.json"), "argument --gold: nope.json: no such file", {"pred.json": "{}"}),
    Case("score --task squad --gold $squad", "needs --gold FILE and --pred FILE"),
    Case("score --task ner --gold $conll --pred p.conll", "p.conll: 1 sentences but the gold file",
         {"p.conll": "john NN O B-PER\n"}),
    Case("score --task sst2 --gold $dev --pred p.txt", "p.txt", {"p.txt": "1\n"}),
    Case("score --task sst2 --conlleval c.txt", "--conlleval applies to --task ner only", {"c.txt": "a O O\n"}),
    Case("score --task ner --conlleval c.txt", "c.txt:2: expected 3 columns", {"c.txt": "a B O\nb O\n"}),
    # fill-mask, info
    Case("fill-mask --model $tiny 'the [MASK] .' --top-k 0", "argument --top-k"),
    Case("fill-mask --model $tiny 'no mask here'", "no [MASK] token in the text"),
    Case("fill-mask --model nowhere 'the [MASK] .'", "argument --model: nowhere: no such model directory"),
    Case("fill-mask --model $evil 'the [MASK] .'", "pytorch_model.bin: cannot read weights safely"),
    Case("info nowhere", "argument model: nowhere: no such model directory"),
    Case("info m", "m/config.json: bad model config: expected a JSON object", {"m/config.json": "[1,2,3]"}),
    Case("info m", "m/config.json: not valid JSON", {"m/config.json": "{"}),
    Case("info $evil", "pytorch_model.bin: cannot read weights safely"),
    # serve: every mistake is found before the port opens
    Case("serve --port 0", "required: --model"),
    Case(f"{SV} --port 70000", "argument --port"),
    Case("serve --model nowhere --port 0", "argument --model: nowhere: no such"),
    Case("serve --model 'a b=x' --port 0", "argument --model: expected NAME=DIR or DIR"),
    Case("serve --model a=$tiny --model a=$tiny --port 0", "--model: name 'a' given twice"),
    Case("serve --model $evil --port 0", "pytorch_model.bin: cannot read weights safely"),
    Case(f"{SV} --max-batch-tokens 0", "argument --max-batch-tokens"),
    Case(f"{SV} --max-queue x", "argument --max-queue"),
    Case(f"{SV} --max-body-bytes 10", "argument --max-body-bytes"),
    Case(f"{SV} --body-timeout 0", "argument --body-timeout"),
    Case(f"{SV} --header-timeout -1", "argument --header-timeout"),
    Case(f"{SV} --openai-encoding nowhere.tiktoken", "argument --openai-encoding: nowhere.tiktoken: no such file"),
    Case(f"{SV} --openai-encoding bad.tiktoken", "bad.tiktoken: not OpenAI's cl100k_base.tiktoken",
         {"bad.tiktoken": "YQ== 0\n"}),
    Case(f"{SV} --int8 --precision bf16", "--precision bf16 runs torch models in bf16: not with --int8"),
    Case(f"{SV} --backend tpu", "argument --backend"),
    Case(f"{SV} --api-key ''", "--api-key (or $BERTKIT_API_KEY) is empty"),
    Case(f"{SV} --host ''", "--host is empty"),
    Case(f"{SV} --long-inputs cut", "argument --long-inputs: invalid choice"),
    Case(f"{SV} --max-windows 0", "argument --max-windows"),
    Case(f"{SV} --host 203.0.113.7", "cannot listen on 203.0.113.7:0"),
    # export, --backend onnx
    Case(EX.replace("onnx", "tflite"), "argument --format"),
    Case(EX.replace("--format onnx", ""), "required: --format"),
    Case(f"{EX} --tolerance 0", "argument --tolerance"),
    Case(f"{EX} --tolerance x", "argument --tolerance"),
    Case(f"{EX} --graph head --pooling cls", "--pooling and --normalize apply to the embedding graph"),
    Case(f"{EX} --graph tree", "argument --graph"),
    Case(EX, "ex: holds a previous export; pass --overwrite", {"ex/onnx.json": "{}"}),
    Case(f"{EX} --overwrite", "ex: is a folder of other files", {"ex/notes.txt": "mine"}),
    Case(EX.replace("$tiny", "nowhere"), "argument --model: nowhere: no such model directory"),
    Case(EX.replace("$tiny", "m") + " --graph head", "config.json names no BertFor... head",
         {"m/config.json": json.dumps({**TINY, "vocab_size": 99}), "m/vocab.txt": "[PAD]\n"}),
    Case(f"{EM} --backend onnx", "no onnx.json: --backend onnx runs a folder made by `bertkit export"),
    Case(f"{EM} --backend tf", "argument --backend"),
    Case(EM.replace("$tiny", "$onnx"), "an ONNX export without torch weights: add --backend onnx"),
    Case(f"{EM.replace('$tiny', '$onnx')} --backend onnx --layers -2", "--backend onnx gives the last layer only"),
    Case(f"{EM.replace('$tiny', '$onnx')} --backend onnx --device cuda", "--backend onnx runs on the CPU"),
    Case(f"{SV} --backend onnx", "no onnx.json: --backend onnx runs a folder made by `bertkit export"),
    Case(f"{SV.replace('$tiny', '$onnx')}", "an ONNX export without torch weights: add --backend onnx"),
    Case(f"{EM.replace('$tiny', '$onnx')} --backend onnx --int8", "exported without --int8"),
    Case(f"{EV} --backend onnx", "no onnx.json: --backend onnx runs a folder"),
    Case(f"{EV.replace('$tiny', '$onnx')} --backend onnx --precision bf16",
         "--precision bf16 runs torch models in bf16: not with --backend onnx"),
    Case(f"{EV.replace('$tiny', '$onnx')} --backend onnx --max-seq-len 32",
         "the exported graph is a BertForPreTraining, not a BertForSequenceClassification"),
    # demo, bench
    Case("demo --minutes 0", "argument --minutes"),
    Case("demo --out demo", "demo: run folder exists already", {"demo/notes.txt": "mine"}),
    Case("demo --preset huge", "argument --preset"),
    Case("demo --threads 0", "argument --threads"),
    Case("bench --repeats 0", "argument --repeats"),
    Case("bench --json b.json", "b.json: exists; pass --overwrite", {"b.json": "[]"}),
    # ablate
    Case("ablate --out abl --scale huge", "argument --scale: unknown scale 'huge'"),
    Case("ablate --out abl --seeds 1,1", "argument --seeds"),
    Case("ablate --out abl --only t9 --plan-only", "--only: no table or row 't9'"),
    Case("ablate --out abl --tasks mnli --plan-only", "--tasks: unknown task(s) mnli"),
    Case("ablate --out abl --data-dir nowhere", "argument --data-dir: nowhere: no such folder"),
    Case("ablate --out abl --data-dir .", "--corpus is required"),
    Case("ablate --corpus $corpus --out abl --plan-only --report-only", "--plan-only and --report-only"),
    Case("ablate --corpus $corpus --out abl --data-dir . --tasks mrpc", "glue/MRPC/train.tsv: no such file"),
    Case("ablate --corpus $corpus --out abl --data-dir . --tasks mrpc --only t5-bert",
         "abl: is a folder of other files",
         {"glue/MRPC/train.tsv": "x", "glue/MRPC/dev.tsv": "x", "abl/notes.txt": "mine"}),
]
