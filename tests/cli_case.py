"""What the rows of tests/test_cli_contract.py share: `Case` (one user mistake) and the inputs and
command stems several rows use.

`$name` in a row's argv stands for a shared input built by that test module's `fixtures`
fixture; `files` is what the case's folder held before the command ran.
"""

from __future__ import annotations

import json
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
DS = "distill --to static --teacher $tiny --out out"
SQ = "score --task squad --gold $squad --pred pred.json"
IX = "index --model $tiny --input $text --out idx --no-progress"
EC = "embed --model $tiny --input $text --pooling cls --out shards --shards --no-progress"  # into a folder of shards
OTHER_SHARDS = json.dumps({"format": "bertkit-embeddings", "version": 1, "shard_size": 5, "shard_format": "parquet",
                           "settings": {}, "sources": [], "shards": []})
SE = "search --index $index 'a film'"
SV = "serve --model $tiny --port 0"
EX = "export --model $tiny --format onnx --out ex"
TU = "tune --model $tiny --task sst2 --train $train --dev $dev --out st --trials 2 --no-progress"
DUPS = '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n'
# what a fine-tuning run stopped after its first seed keeps (progress.json), made with another --lr
UNFINISHED = json.dumps({"version": 1, "settings": {"hyper": {"lr": 0.5}}, "seeds": [1, 2], "finished": [{"seed": 1}],
                         "best": None, "resumes": []})
