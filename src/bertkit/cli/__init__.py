"""`bertkit COMMAND ...`: one module per command under bertkit.cli, imported only when used.

Each command module defines `add_arguments(parser)`, optionally `check(args)`, and
`run(args) -> int`. Arguments are checked in one place before any work starts: each flag by its
typed check when parsed (bertkit.cli.args), then `check(args)` for what needs several flags or
the file system (outputs refused unless `--overwrite`, flags that only apply together). A
`UserError` anywhere, and an `OSError` naming a file (a folder we may not write into, a full
disk), becomes one line on stderr and exit status 2; anything else is a bug and keeps its
traceback. A command stopped by SIGTERM or SIGINT exits with 128 + the signal's number, except
`serve`, for which SIGTERM is the normal way to stop (it drains, then exits 0).

Every command that runs a model takes `--threads N`; without it (and without OMP_NUM_THREADS),
`bertkit.threads` picks the count from the machine's load once the flags are checked, and the
command's first line on stderr says what it picked.
"""

from __future__ import annotations

import importlib
import sys

from bertkit.cli.args import Parser, positive_int
from bertkit.errors import UserError

# command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("bertkit.cli.demo", "end to end on BBC News: vocabulary, pretraining, word senses, frozen-feature probes"),
    "tokenizer": ("bertkit.cli.tokenizer", "train a WordPiece vocabulary (`bertkit tokenizer train`)"),
    "tokenize": ("bertkit.cli.tokenize", "print the tokens and ids of a text (or a pair)"),
    "embed": ("bertkit.cli.embed", "sentence vectors for each line of a file, to .npy"),
    "fill-mask": ("bertkit.cli.fill_mask", "predict the [MASK] tokens of a text"),
    "info": ("bertkit.cli.info", "config, parameter count and heads of a model directory"),
    "data": ("bertkit.cli.data", "build offline retrieval sets in BEIR's layout (`bertkit data beir-squad`)"),
    "prepare": ("bertkit.cli.prepare", "turn raw text into pretraining shards"),
    "pretrain": ("bertkit.cli.pretrain", "pretrain with MLM (+NSP) or LTR"),
    "finetune": ("bertkit.cli.finetune", "fine-tune on GLUE, SQuAD, NER or your own data"),
    "tune": ("bertkit.cli.tune", "search fine-tuning's hyper-parameters with Optuna; a rerun continues the study"),
    "distill": ("bertkit.cli.distill", "train a smaller student to imitate a teacher (DistilBERT-style)"),
    "evaluate": ("bertkit.cli.evaluate", "evaluate a model on a task's data"),
    "score": ("bertkit.cli.score", "score a predictions file with the official metric"),
    "features": ("bertkit.cli.features", "export per-token features from chosen layers"),
    "index": ("bertkit.cli.index", "embed a corpus into a semantic search index"),
    "search": ("bertkit.cli.search", "the best passages of an index for a query, optionally reranked"),
    "serve": ("bertkit.cli.serve", "an HTTP inference service: TEI/OpenAI-shaped routes, dynamic batching"),
    "export": ("bertkit.cli.export", "an ONNX graph of a model directory (+ int8), checked against PyTorch"),
    "bench": ("bertkit.cli.bench", "benchmark bertkit against transformers side by side"),
    "ablate": ("bertkit.cli.ablate", "the paper's ablations (Tables 5-8), resumable, reported beside its figures"),
}
# commands that run no model: no --threads, no thread choice
NO_MODEL = frozenset({"tokenize", "tokenizer", "score", "data", "info", "prepare"})


def note_long(command: str, report, what: str = "") -> None:
    """One note on stderr when inputs were longer than the token limit: how many, and whether they
    were cut or read in windows (`report`: a `long_inputs.LongReport` or its `as_dict()`)."""
    from bertkit.long_inputs import LongReport

    report = LongReport.from_dict(report) if isinstance(report, dict) else report
    line = report.note(what)
    if line:
        print(f"bertkit {command}: note: {line}", file=sys.stderr, flush=True)


def _usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return f"usage: bertkit COMMAND [options]\n\ncommands:\n{rows}\n\n`bertkit COMMAND --help` for a command's options."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from bertkit import __version__

        print(f"bertkit {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"bertkit: error: unknown command {name!r}; `bertkit --help` lists the commands", file=sys.stderr)
        return 2
    module_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = Parser(prog=f"bertkit {name}", description=text)
    module.add_arguments(parser)
    if name not in NO_MODEL:
        parser.add_argument("--threads", type=positive_int, default=None,
                            help="CPU threads for PyTorch (default: OMP_NUM_THREADS if set, else the cores the "
                                 "machine's load average leaves free)")
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as e:  # --help, or a flag that failed its check (one line already printed)
        return int(e.code or 0)
    return _run(name, module, args)


def _run(name: str, module, args) -> int:
    """Check the flags together, choose the threads, run: a user's mistake is one line and exit 2."""
    try:
        if hasattr(module, "check"):
            module.check(args)
        if name not in NO_MODEL:
            _threads(name, args)
        return int(module.run(args) or 0)
    except UserError as e:
        print(f"bertkit {name}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.filename is None:
            raise
        print(f"bertkit {name}: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertkit {name}: interrupted", file=sys.stderr)
        return 130


def _threads(name: str, args) -> None:
    """Apply `bertkit.threads.choose_threads`; `args.threads` becomes the count. The choice is
    reported when it was made here (a count the user fixed is not repeated back)."""
    from bertkit.threads import apply_threads, choose_threads

    threads = choose_threads(args.threads, server=name == "serve")
    apply_threads(threads)
    args.threads = threads.count
    if threads.chosen:
        print(f"bertkit {name}: {threads.line()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
