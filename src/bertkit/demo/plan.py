"""The demo's plan: sizes, label budgets, the time budget of every stage, and the thread count.

The whole demo has one budget (`--minutes`). Every stage after pretraining is a fixed workload
whose time is estimated from the number of articles (measured with one thread on this project's
2-core machine), and pretraining gets what is left when it starts, so a slow vocabulary or a slow
disk shortens pretraining instead of the demo overrunning. Word2Vec and all-MiniLM-L6-v2 need no
model of the demo's, so they run in a second process beside pretraining (`demo.side`) and only the
demo's own models are left for the stages after it; if the side process is still running when
pretraining ends, the senses stage waits for it.

Threads: on a machine another job shares, PyTorch's default (one thread per core) made each
pretraining step about 3x slower, since every OpenMP barrier waits for the thread whose core is
taken; one thread kept most of its speed. The count is `bertkit.threads.choose_threads`'s, as for
every command: the cores no other process is using (from the load average).
"""

from __future__ import annotations

from dataclasses import dataclass

# One-thread costs that size the stages after pretraining (seconds), measured on the quiet 2-core
# machine. `slowdown` scales them: the demo times MiniLM on a few articles before pretraining.
MINILM_SECONDS_PER_ARTICLE = 0.06  # all-MiniLM-L6-v2 at 128 tokens, as the full demo ran it (~17 articles/s)
SMALL_SECONDS_PER_ARTICLE = 0.006  # the demo's shape (tiny preset), pretrained and random: two passes
FIXED_SECONDS = {"fill-mask": 5.0, "senses": 10.0, "labels": 10.0, "summary": 3.0}
# Outside the stages' clock: starting Python and importing torch before it, exiting after it
# (`time bertkit demo` measured 12 min 0.2 s for a 12-minute budget spent to the second).
MARGIN_SECONDS = 15.0


# On a slow or busy CPU the demo's shape learns too little in its minutes. Measured at equal time on
# an AVX2 fp32 core (docs/pretraining.md#learning-per-cpu-minute-the-levers; 210 s, about ten
# minutes of a Zen 1 core's demo pretraining): the tiny preset's 2 x 128 ended on the plateau at 15.1%
# validation MLM accuracy (4-label probe 48.1%), where one layer of width 64, 4.9x cheaper a step,
# passed 20% after 84 s and ended at 27.4% (probe 69.4%); 2 x 64 reached 20.5%, 1 x 128 24.9%.
# Below this many tiny steps in its budget the demo takes the narrow shape.
NARROW_BELOW_STEPS = 3000
NARROW = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 256}
NARROW_NAME = "1 layer, hidden 64"
# all-MiniLM-L6-v2's speed in the side process's precision against the calibration's fp32: int8 1.6x,
# bf16 on a CPU with bf16 kernels 2.8x (docs/cli.md, `--precision`)
SIDE_SPEEDUP = {"fp32": 1.0, "bf16": 2.8, "int8": 1.6}


@dataclass
class Machine:
    """What the demo measured of this machine before it planned (`demo.run.measure_machine`)."""

    cpu: str  # lscpu's model name, or the platform's
    bf16: bool  # bf16 kernels in hardware, and PyTorch allowed to use them
    threads: int  # threads the demo's pretraining uses
    step_seconds: float  # one pretraining step of the tiny preset at the demo's shape, measured now
    minilm_seconds: float  # all-MiniLM-L6-v2 on one article, one thread, measured now
    slowdown: float  # minilm_seconds against the quiet reference machine's
    side_shares_core: bool = False  # no core free for the side process: it takes pretraining's CPU while it runs


@dataclass
class Choices:
    """What the demo chose for this machine and why: the model shape's overrides, the side
    process's precision for all-MiniLM-L6-v2, and one line of reasons each."""

    overrides: dict
    side_precision: str  # "fp32", "bf16" or "int8"
    reasons: list[str]


@dataclass
class DemoPlan:
    """What the demo runs; `minutes` is the whole demo's budget."""

    minutes: float = 12.0
    vocab_size: int = 8000
    max_seq_len: int = 128
    # tiny (2 layers, hidden 128) sees ~25x more text than mini in the same CPU minutes, which
    # matters more than depth on a 1M-word corpus.
    preset: str = "tiny"
    test_fraction: float = 0.2
    articles_per_topic: int | None = None  # a smaller demo (tests); None takes every article
    # Labelled training articles per topic for the frozen-feature probe; every training article
    # is the last budget. Small budgets are where pretraining shows (with every label a random
    # model's features are nearly as good).
    label_budgets: tuple[int, ...] = (4, 16, 64)
    probe_draws: int = 5  # different labelled subsets per budget (their mean accuracy is reported)
    probe_max_len: int = 128  # tokens of each article the probe's encoders read
    threads: int | None = None  # None: choose_threads()
    objective: str = "mlm"  # pretraining: "mlm", or "electra" (replaced-token detection)
    shape: str = "auto"  # "auto": by the machine (`choose`); "tiny": the preset as it is; "narrow": NARROW
    seed: int = 0

    def later_seconds(self, articles: int, slowdown: float = 1.0) -> dict[str, float]:
        """Planned seconds of each stage after pretraining, for `articles` articles in all, on a
        machine `slowdown` times slower than the quiet one. all-MiniLM-L6-v2 and Word2Vec run
        beside pretraining (`demo.side`), so only the demo's own models are left for later."""
        encode = articles * SMALL_SECONDS_PER_ARTICLE
        return {"fill-mask": FIXED_SECONDS["fill-mask"],
                "senses": FIXED_SECONDS["senses"],
                "labels": FIXED_SECONDS["labels"] + slowdown * encode,
                "summary": FIXED_SECONDS["summary"]}

    def choose(self, machine: Machine, pretrain_seconds: float, articles: int = 0) -> Choices:
        """The shape and side precision that keep the story on this machine (see NARROW_BELOW_STEPS),
        each with its reason; `shape` "auto" decides by the steps the budget buys, "tiny" or
        "narrow" force one. The step was timed before the side process started: where it shares
        pretraining's core, its CPU (MiniLM over the `articles` at the measured rate) is taken out."""
        precision = "bf16" if machine.bf16 else ("int8" if machine.slowdown >= 1.5 else "fp32")
        side = articles * machine.minilm_seconds / SIDE_SPEEDUP[precision] if machine.side_shares_core else 0.0
        steps = max(0.0, pretrain_seconds - side) / max(machine.step_seconds, 1e-9)
        shared = f", less the side process's ~{side:.0f} s of CPU on its core" if side else ""
        reasons = [f"{machine.cpu}: {'bf16' if machine.bf16 else 'fp32 (no bf16 kernels)'}, {machine.threads} "
                   f"thread(s), a {self.preset} step {1000 * machine.step_seconds:.0f} ms: about {steps:,.0f} steps in "
                   f"{pretrain_seconds / 60:.1f} minutes of pretraining{shared}"]
        narrow = self.shape == "narrow" or (self.shape == "auto" and steps < NARROW_BELOW_STEPS)
        if narrow:
            reasons.append(f"fewer than {NARROW_BELOW_STEPS:,} steps: the narrow shape ({NARROW_NAME}), about 5x "
                           f"cheaper a step, which leaves the masked-LM plateau in that time where the {self.preset} "
                           "preset does not")
        if precision == "int8":
            reasons.append(f"all-MiniLM-L6-v2 at {1000 * machine.minilm_seconds:.0f} ms an article "
                           f"({machine.slowdown:.1f}x the quiet machine): int8 beside pretraining, 1.6x cheaper, so it "
                           "takes less of the pretraining's CPU (its features within cosine 0.97 of fp32's)")
        return Choices(dict(NARROW) if narrow else {}, precision, reasons)

    def pretrain_seconds(self, elapsed: float, articles: int, slowdown: float = 1.0) -> float:
        """What the budget leaves for pretraining once `elapsed` seconds are spent (at least 6 s)."""
        left = self.minutes * 60 - MARGIN_SECONDS - elapsed - sum(self.later_seconds(articles, slowdown).values())
        return max(6.0, left)


def choose_threads(requested: int | None = None) -> int:
    """`requested` if given, else `bertkit.threads.choose_threads`'s count (OMP_NUM_THREADS, or
    the cores that no other process keeps busy)."""
    from bertkit.threads import choose_threads as choose

    return choose(requested).count
