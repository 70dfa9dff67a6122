"""Model cards: the README.md in every model directory bertkit saves.

Hugging Face's model-card layout: a YAML metadata block between `---` lines (library_name,
base_model where there is one, pipeline_tag, tags, datasets by path, and the dev metrics as a
`model-index` result), then prose: what was trained and how (the command with every setting it
resolved to), the dev results, and how to load the folder in bertkit, transformers and, for a
bi-encoder, sentence-transformers. `Card` is what a card says; `pretrain_card` and `finetune_card`
fill one from a run, `render` writes it and `write_card` puts it in a folder atomically. The YAML
is written here in block style with every string JSON-quoted (a JSON string is a YAML string), so
no YAML package is needed to write it; tests/test_model_card.py reads it back with yaml.safe_load.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

CARD_FILE = "README.md"
HERE = "PATH"  # the folder itself, in the usage snippets: a card stays true when the folder moves

# A fine-tuning task -> (Hugging Face pipeline tag, transformers class that loads the folder).
_SEQUENCE = ("text-classification", "AutoModelForSequenceClassification")
_TASK_KINDS = {
    "squad": ("question-answering", "AutoModelForQuestionAnswering"),
    "ner": ("token-classification", "AutoModelForTokenClassification"),
    "embedding": ("sentence-similarity", "AutoModel"),
    "rerank": ("text-ranking", "AutoModelForSequenceClassification"),
    "mlm": ("fill-mask", "AutoModelForMaskedLM"),
}


@dataclass
class Card:
    """What one model card says."""

    title: str
    summary: str  # a paragraph: what the model is, and what it was made from
    pipeline_tag: str  # Hugging Face's task tag: fill-mask, text-classification, ...
    transformers_class: str | None  # the Auto class that loads the folder; None: transformers cannot
    base_model: str | None = None  # the model it started from; None: trained from scratch
    datasets: list[str] = field(default_factory=list)  # training and dev data, by path
    metrics: dict[str, float] = field(default_factory=dict)  # the dev results
    evaluated_on: str | None = None  # what the metrics were measured on
    command: str | None = None  # the command line that makes it again, every setting explicit
    settings: dict = field(default_factory=dict)  # the resolved settings, as the run recorded them
    tags: list[str] = field(default_factory=list)
    bertkit_usage: str = ""  # shell lines
    sentence_transformers: bool = False  # the folder has sentence-transformers' module files
    other_usage: list[tuple[str, str, str]] = field(default_factory=list)  # (library, code language, code)

    def metadata(self) -> dict:
        meta: dict = {"library_name": "bertkit"}
        if self.base_model:
            meta["base_model"] = self.base_model
        meta["pipeline_tag"] = self.pipeline_tag
        meta["tags"] = list(dict.fromkeys(["bertkit", "bert", *self.tags]))
        if self.datasets:
            meta["datasets"] = list(dict.fromkeys(self.datasets))
        if self.metrics:
            dataset = self.evaluated_on or "dev"
            meta["metrics"] = list(self.metrics)
            meta["model-index"] = [{"name": self.title, "results": [{
                "task": {"type": self.pipeline_tag},
                "dataset": {"name": dataset, "type": dataset},
                "metrics": [{"type": k, "name": k, "value": v} for k, v in self.metrics.items()],
            }]}]
        return meta


def render(card: Card) -> str:
    """The card as README.md's text."""
    lines = ["---", *_yaml(card.metadata()), "---", "", f"# {card.title}", "", card.summary, ""]
    lines += ["## Training", ""]
    if card.command:
        lines += ["Made by:", "", "```bash", card.command, "```", ""]
    if card.settings:
        lines += ["Resolved settings:", "", "```json", json.dumps(card.settings, indent=2, default=str), "```", ""]
    lines += ["## Results", ""]
    if card.metrics:
        lines += [f"On {card.evaluated_on or 'dev'}:", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in card.metrics.items()]
    else:
        lines += ["No dev results were measured."]
    lines += ["", "## Use", "", f"`{HERE}` is this folder.", "", "bertkit:", "", "```bash", card.bertkit_usage.strip(),
              "```", ""]
    if card.transformers_class:
        lines += ["transformers:", "", "```python", *_transformers_usage(card), "```", ""]
    for library, language, code in card.other_usage:
        lines += [f"{library}:", "", f"```{language}", code.strip(), "```", ""]
    if card.sentence_transformers:
        lines += ["sentence-transformers:", "", "```python", "from sentence_transformers import SentenceTransformer",
                  "", f'model = SentenceTransformer("{HERE}")',
                  'vectors = model.encode(["A first sentence.", "A second one."])', "```", ""]
    return "\n".join(lines)


def _transformers_usage(card: Card) -> list[str]:
    cls = card.transformers_class
    return [f"from transformers import AutoTokenizer, {cls}", "",
            f'tokenizer = AutoTokenizer.from_pretrained("{HERE}")', f'model = {cls}.from_pretrained("{HERE}")',
            'outputs = model(**tokenizer("A sentence to read.", return_tensors="pt"))']


def write_card(folder: str | Path, card: Card) -> None:
    """README.md in `folder`, written atomically."""
    from bertkit.io import write_text

    write_text(Path(folder) / CARD_FILE, render(card))


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key) else json.dumps(key)


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, (dict, list)):  # empty
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(str(value), ensure_ascii=False)


def _yaml(value, indent: int = 0) -> list[str]:
    """A dict or list of dicts, lists and scalars as block-style YAML lines."""
    pad = "  " * indent
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines += [f"{pad}{_key(k)}:", *_yaml(v, indent + 1)]
            else:
                lines.append(f"{pad}{_key(k)}: {_scalar(v)}")
        return lines
    for item in value:
        if isinstance(item, (dict, list)) and item:
            nested = _yaml(item, indent + 1)  # its first line moves up behind the dash
            lines += [f"{pad}- {nested[0].lstrip()}", *nested[1:]]
        else:
            lines.append(f"{pad}- {_scalar(item)}")
    return lines


def numbers(record: dict, skip: tuple[str, ...] = ("step", "kind", "epoch")) -> dict[str, float]:
    """A record's finite numbers (per-type breakdowns and flags left out)."""
    return {k: v for k, v in record.items() if k not in skip and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


def command_line(command: str, args: dict) -> str:
    """`bertkit COMMAND` with every flag `args` (argparse's namespace as a dict) holds: None and
    False left out, True a bare flag, a tuple comma-separated (--seeds 1,2,3), a list one word each
    (nargs), a dict as JSON."""
    words = ["bertkit", command]
    for name, value in args.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            text = (",".join(map(str, value)) if isinstance(value, tuple)
                    else json.dumps(value) if isinstance(value, dict) else str(value))
            words += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return shlex.join(words)


def pretrain_card(cfg, records: list[dict], which: str = "model") -> Card:
    """The card of a pretraining run's `which` folder (model; ELECTRA's discriminator, generator),
    from its options (a `TrainConfig`) and its metrics.jsonl records."""
    from bertkit.pretrain.setup import command_line as pretrain_command

    val = next((r for r in reversed(records) if r.get("kind") == "val"), None)
    last = next((r for r in reversed(records) if r.get("kind") == "train"), {})
    metrics = numbers(val) if val else {f"train_{k}": v for k, v in numbers(last).items() if k.endswith("loss")}
    objective = cfg.objective
    if which == "generator":
        pipeline, cls, what = "fill-mask", "AutoModelForMaskedLM", "ELECTRA's generator (a small masked-LM)"
    elif which == "discriminator":
        pipeline, cls, what = "feature-extraction", "AutoModelForPreTraining", "ELECTRA's discriminator (RTD head)"
    elif objective in ("mlm", "mlm+nsp", "mlm+sop"):
        pair = {"mlm+nsp": " and NSP head", "mlm+sop": " and sentence-order head"}.get(objective, "")
        pipeline, cls = "fill-mask", "AutoModelForPreTraining" if pair else "AutoModelForMaskedLM"
        what = f"a {getattr(cfg, 'arch', 'bert')} encoder with its masked-LM head{pair}"
    else:  # ltr (causal attention), or ELECTRA's discriminator as a plain BERT
        pipeline, cls = "feature-extraction", "AutoModel"
        what = ("a left-to-right (causal attention) encoder" if objective == "ltr"
                else "ELECTRA's discriminator as a plain BERT encoder")
    steps = last.get("step")
    made = (f"continued pretraining of {cfg.init_from}" if cfg.init_from else f"pretrained from scratch ({cfg.preset})")
    usage = (f"bertkit fill-mask --model {HERE} \"The capital of France is [MASK].\"\n" if pipeline == "fill-mask"
             else "") + f"bertkit finetune --model {HERE} --task sst2 --train train.tsv --dev dev.tsv --out OUT"
    return Card(
        title=f"{Path(cfg.out).name}/{which}", pipeline_tag=pipeline, transformers_class=cls,
        summary=f"{what[0].upper()}{what[1:]}, {made} by bertkit with the {objective} objective and the {cfg.recipe} "
                f"recipe for {steps} steps on `{cfg.data}`.",
        base_model=cfg.init_from, datasets=[str(cfg.data)], metrics=metrics,
        evaluated_on=f"{cfg.data} (validation split)" if val else f"{cfg.data} (last training steps)",
        command=shlex.join(pretrain_command(cfg)), settings=cfg.to_dict(),
        tags=["pretraining", objective, *(["electra"] if objective == "electra" else [])], bertkit_usage=usage)


def finetune_card(task, run_info: dict, run, hp) -> Card:
    """The card of a fine-tuned (or distilled) model: its task, the run's arguments (`run_info`:
    model, train, dev, args; "distilled" for a student), the saved seed's run (`SeedRun`) and
    the hyper-parameters."""
    from dataclasses import asdict

    settings = task.settings()
    name = settings.get("task", task.name)
    pipeline, cls = _TASK_KINDS.get(name, _SEQUENCE)
    if settings.get("feature_based"):
        pipeline, cls = "token-classification", "AutoModel"  # the BiLSTM beside it is bertkit's own
    distilled = bool(run_info.get("distilled"))
    base = str(run_info["model"])
    data = [str(p) for key in ("train", "dev") for p in _paths(run_info.get(key))]
    hyper = {**asdict(hp), "seeds": tuple(hp.seeds)}
    args = run_info.get("args", {})  # the command's flags; a library call's job has "hyper" instead
    resolved = {**args, **{k: v for k, v in hyper.items() if k in args}}  # e.g. --lr's default for the task
    command = command_line("distill" if distilled else "finetune", resolved) if "hyper" not in args else None
    made = f"distilled from the teacher {base}" if distilled else f"fine-tuned from {base}"
    steps = f"after {run.steps} step{'s' if run.steps != 1 else ''}"
    if run.best_step is not None:  # --metric-for-best / --early-stopping kept an earlier evaluation
        steps = f"at step {run.best_step}, its best evaluation"
    return Card(
        title=name, pipeline_tag=pipeline, transformers_class=cls,
        summary=f"A bertkit model for `{name}` ({pipeline}), {made} on `{run_info.get('train')}`; the saved model "
                f"is seed {run.seed}'s {steps} (the seed with the best dev {task.main_metric}).",
        base_model=base, datasets=data, metrics=numbers(run.dev), evaluated_on=str(run_info.get("dev") or "dev"),
        command=command, settings={"task": settings, "hyper": {**hyper, "seeds": list(hp.seeds)}},
        tags=[name, "distillation" if distilled else "fine-tuned", *(["sentence-transformers", "feature-extraction"]
                                                                      if name == "embedding" else [])],
        bertkit_usage=_finetune_usage(name, run_info.get("dev")), sentence_transformers=name == "embedding")


# An export's graph kind (onnx.json's "kind") -> Hugging Face's pipeline tag.
_EXPORT_KINDS = {
    "BertForSequenceClassification": "text-classification",
    "BertForTokenClassification": "token-classification",
    "BertForQuestionAnswering": "question-answering",
    "BertForMaskedLM": "fill-mask",
    "BertForPreTraining": "fill-mask",
}


def export_card(meta: dict, source: Path, command: str, task: str | None) -> Card:
    """The card of a `bertkit export` folder: from its onnx.json (`meta`), the directory it was
    exported from, the command that makes it (`command_line`) and, for a fine-tuned model, its task
    (finetune.json's). Its metrics are what the export measured: each graph's largest difference
    from PyTorch on random padded batches."""
    kind = meta["kind"]
    st = (source / "modules.json").is_file()
    pipeline = _EXPORT_KINDS.get(kind, "sentence-similarity" if kind == "embedding" and st else "feature-extraction")
    metrics = {f"fp32_max_abs_diff_{name}": v for name, v in meta["max_abs_diff"].items()}
    if "int8" in meta:
        metrics.update({f"int8_max_abs_diff_{name}": v for name, v in meta["int8"]["max_abs_diff"].items()})
        if meta["int8"].get("min_cosine_to_fp32") is not None:
            metrics["int8_min_cosine_to_fp32"] = meta["int8"]["min_cosine_to_fp32"]
    if kind == "embedding":
        usage = (f"bertkit embed --model {HERE} --backend onnx --input sentences.txt --out vectors.npy\n"
                 f"bertkit serve --model {HERE} --backend onnx")
    else:
        usage = (f"bertkit evaluate --model {HERE} --backend onnx --task {task} --data DEV_FILE\n" if task else "") \
            + f"bertkit serve --model {HERE} --backend onnx"
    graph = "the embedding graph (" + ("normalised " if meta.get("normalize") else "") + \
        f"{meta.get('pooling')} pooling inside)" if kind == "embedding" else f"the {kind} head's graph"
    onnxruntime = "\n".join([
        "import onnxruntime", "from transformers import AutoTokenizer", "",
        f'tokenizer = AutoTokenizer.from_pretrained("{HERE}")',
        f'session = onnxruntime.InferenceSession("{HERE}/{meta["files"]["fp32"]}")',
        'batch = tokenizer(["A sentence to read."], return_tensors="np")',
        f"inputs = {{name: batch[name] for name in {tuple(meta['inputs'])!r}}}",
        f"outputs = dict(zip({list(meta['outputs'])!r}, session.run(None, inputs)))"])
    return Card(
        title=f"{source.name} (ONNX)", pipeline_tag=pipeline, transformers_class=None,
        summary=f"An ONNX export (opset {meta['opset']}) of `{source}`: {graph}, fp32"
                + (" and int8 (dynamic quantisation, int8 weights per channel)" if "int8" in meta else "")
                + f", with its config and tokenizer. How the model was trained and its dev results are in `{source}`'s"
                " own README.md; the results below are the export's check against PyTorch.",
        base_model=str(source), metrics=metrics, evaluated_on="random padded batches, against the PyTorch model",
        command=command, settings=meta, tags=["onnx", *([task] if task else [])], bertkit_usage=usage,
        sentence_transformers=False, other_usage=[("ONNX Runtime", "python", onnxruntime)])


def _paths(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _finetune_usage(name: str, dev) -> str:
    if name == "embedding":
        return (f"bertkit embed --model {HERE} --input sentences.txt --out vectors.npy\n"
                f"bertkit serve --model {HERE}")
    if name == "mlm":
        return f"bertkit fill-mask --model {HERE} \"The capital of France is [MASK].\""
    data = shlex.quote(str(dev)) if isinstance(dev, (str, Path)) else "DEV_FILE"
    return f"bertkit evaluate --model {HERE} --task {name} --data {data}\nbertkit serve --model {HERE}"
