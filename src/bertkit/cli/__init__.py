"""`bertkit COMMAND ...`: one module per command under bertkit.cli, imported only when used.

Each command module defines `add_arguments(parser)`, optionally `check(args)`, and
`run(args) -> int`. Arguments are checked in one place before any work starts: each flag by its
typed check when parsed (bertkit.cli.args), then `check(args)` for what needs several flags or
the file system (outputs refused unless `--overwrite`, flags that only apply together). A
`UserError` anywhere, and an `OSError` naming a file (a folder we may not write into, a full
disk), becomes one line on stderr and exit status 2; anything else is a bug and keeps its
traceback. A command stopped by SIGTERM or SIGINT exits with 128 + the signal's number, except
`serve`, for which SIGTERM is the normal way to stop (it drains, then exits 0).

A write the machine refuses once the work has started (a full disk, a file over the size limit,
a read-only or failing disk, an output folder deleted under the run: `bertkit.io.WriteError`) is
one line too, naming the path, what the command kept, and the command line that continues
(with --resume where the command has it), and exit status 1.

Every command that runs a model takes `--threads N`; without it (and without OMP_NUM_THREADS),
`bertkit.threads` picks the count from the machine's load once the flags are checked. The line
that says so, and the notes on what a stopped run left behind beside `--out` (removed here), wait
until the command writes its first output: a mistake found before that is the only line. Before it,
where a command's `--precision` was left at fp32 on a CPU that computes bf16, one line says so.
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
    "experiment": ("bertkit.cli.experiment", "an experiment (Table 5's curve, ...), resumable cell by cell, reported"),
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
    resumable = "--resume" in parser._option_string_actions
    return _run(name, module, args, _continuing(name, argv[1:], resumable))


def _run(name: str, module, args, again: str) -> int:
    """Check the flags together, choose the threads, run: a user's mistake is one line and exit 2;
    a refused write one line and exit 1 (`again`: the command line that continues)."""
    from bertkit.io import write_error

    notice = Notice(f"bertkit {name}: ")
    try:
        if hasattr(module, "check"):
            module.check(args)
        notice.add(_precision_note(args))
        if name not in NO_MODEL:
            notice.add(_threads(name, args))
        notice.add(*_leftovers(args))
        with notice:
            return int(module.run(args) or 0)
    except UserError as e:
        print(f"bertkit {name}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        refused = write_error(e, e.filename or getattr(args, "out", None) or "the output")
        if refused is None and e.filename is None:
            raise
        if refused is None:
            print(f"bertkit {name}: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(_refused_line(name, refused, again), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bertkit {name}: interrupted", file=sys.stderr)
        return 130


def _refused_line(name: str, e, again: str) -> str:
    """`bertkit NAME: error: PATH: no space left on device; kept ...; continue with: COMMAND`."""
    kept = f"; kept {e.kept}" if getattr(e, "kept", None) else ""
    return f"bertkit {name}: error: {e.filename}: {e.strerror}{kept}; continue with: {again}"


def _continuing(name: str, argv: list[str], resumable: bool) -> str:
    """The command line that continues this one: itself, with --resume (and without --overwrite,
    which would start again) where the command has it."""
    import shlex

    words = ["bertkit", name, *argv]
    if resumable:
        words = [w for w in words if w != "--overwrite"] + ([] if "--resume" in words else ["--resume"])
    return shlex.join(words)


def _precision_note(args) -> str | None:
    """A command of `args.add_precision` left at its fp32 default: where bf16 would run, the line
    that says so (`devices.bf16_note`), the command's first."""
    if getattr(args, "precision_chosen", True):
        return None
    from bertkit.devices import bf16_note

    return bf16_note(args.device, getattr(args, "int8", False), getattr(args, "backend", "torch"))


def _threads(name: str, args) -> str | None:
    """Apply `bertkit.threads.choose_threads`; `args.threads` becomes the count. The line that
    reports the choice when it was made here (a count the user fixed is not repeated back)."""
    from bertkit.threads import apply_threads, choose_threads

    threads = choose_threads(args.threads, server=name == "serve")
    apply_threads(threads)
    args.threads = threads.count
    return threads.line() if threads.chosen else None


def _leftovers(args) -> list[str]:
    """Notes on what a stopped run left beside the output path, which `bertkit.io.remove_leftovers`
    clears (the command's own temporary names only)."""
    from bertkit.io import remove_leftovers

    out = getattr(args, "out", None)
    return [f"note: {line}" for line in remove_leftovers(out)] if isinstance(out, str) and out else []


class Notice:
    """Lines for stderr that wait for the command's first output (on stdout or stderr), so that a
    mistake found before any work is the only line; dropped when none comes."""

    def __init__(self, prefix: str):
        self.prefix, self.lines, self._streams, self._proxies = prefix, [], None, ()

    def add(self, *lines: str | None) -> None:
        self.lines += [line for line in lines if line]

    def __enter__(self):
        if self.lines:
            self._streams = (sys.stdout, sys.stderr)
            # Held here until the command ends: print() borrows sys.stdout, and a stream it is
            # writing to must outlive the write that puts the real one back.
            self._proxies = (_FirstWrite(sys.stdout, self), _FirstWrite(sys.stderr, self))
            sys.stdout, sys.stderr = self._proxies
        return self

    def flush(self) -> None:
        """Print the lines now (the first output is about to be written), once."""
        if self._streams is not None:
            streams, self._streams = self._streams, None
            sys.stdout, sys.stderr = streams
            streams[1].write("".join(f"{self.prefix}{line}\n" for line in self.lines))
            streams[1].flush()

    def __exit__(self, kind, error, trace):
        if self._streams is not None:  # nothing was written: the lines go (a mistake stays one line)
            sys.stdout, sys.stderr = self._streams
            self._streams = None


class _FirstWrite:
    """A stream that lets `notice` print first, then is itself (every other attribute passes through)."""

    def __init__(self, stream, notice: Notice):
        self._stream, self._notice = stream, notice

    def write(self, text: str) -> int:
        if text:
            self._notice.flush()
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


if __name__ == "__main__":
    sys.exit(main())
