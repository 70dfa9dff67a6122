"""Pretraining recipes: the time-based schedule as a pure function, how a recipe fills a run's
settings (the user's flags win), dropout off for the run only, and `--recipe budget --minutes`
end to end: it stops on time with the learning rate at ~0, writes a model transformers loads,
and a resumed run continues the same clock."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.heads import BertForMaskedLM
from bertkit.pretrain import TrainConfig
from bertkit.pretrain.recipes import RECIPES, set_dropout
from bertkit.train.optim import lr_at_time
from pretrain_helpers import TINY, run

PEAK = 1e-3


# ---- the schedule ----
def test_time_schedule_warms_up_from_zero_to_the_peak():
    budget, warmup = 100.0, 0.1  # warm-up over the first 10 s
    rising = [lr_at_time(t, budget, warmup, PEAK) for t in (0, 2.5, 5, 7.5, 10)]
    assert rising == pytest.approx([0, PEAK / 4, PEAK / 2, 3 * PEAK / 4, PEAK], abs=1e-12)


def test_time_schedule_decays_linearly_to_exactly_zero_at_the_deadline_and_stays_there():
    budget, warmup = 100.0, 0.1
    assert lr_at_time(55, budget, warmup, PEAK) == pytest.approx(PEAK / 2)  # half-way through the decay
    assert lr_at_time(99, budget, warmup, PEAK) == pytest.approx(PEAK / 90)
    assert lr_at_time(budget, budget, warmup, PEAK) == 0.0
    assert lr_at_time(budget + 1e-9, budget, warmup, PEAK) == 0.0
    assert lr_at_time(10 * budget, budget, warmup, PEAK) == 0.0
    assert lr_at_time(-1, budget, warmup, PEAK) == 0.0  # before the start: clamped too
    decay = [lr_at_time(t, budget, warmup, PEAK) for t in range(10, 101, 5)]
    assert all(a > b for a, b in itertools.pairwise(decay))


def test_time_schedule_without_warmup_starts_at_the_peak():
    assert lr_at_time(0, 60, 0.0, PEAK) == PEAK
    assert lr_at_time(30, 60, 0.0, PEAK) == pytest.approx(PEAK / 2)


@pytest.mark.parametrize("budget, warmup", [(0, 0.1), (-5, 0.1), (60, 1.0), (60, -0.1)])
def test_time_schedule_refuses_a_meaningless_budget_or_warmup(budget, warmup):
    with pytest.raises(ValueError):
        lr_at_time(1, budget, warmup, PEAK)


def test_the_loop_takes_the_lr_at_the_steps_expected_end_and_stops_before_overrunning():
    from bertkit.pretrain.loop import _Loop

    loop = object.__new__(_Loop)  # only the schedule's state: no model or data needed
    loop.cfg = TrainConfig(data="d", out="o", recipe="budget", minutes=1)
    loop.budget, loop.step_s, loop.total, loop.warmup = 60.0, 2.0, None, loop.cfg.warmup
    warmup, peak = loop.cfg.warmup, loop.cfg.lr
    assert loop.lr(0, 30.0) == pytest.approx(lr_at_time(32.0, 60.0, warmup, peak))
    assert not loop.done(0, 57.9)  # a 2 s step still ends before 60 s
    assert loop.done(0, 58.1)  # it would not: stop now, at lr ~0
    paper = TrainConfig(data="d", out="o", minutes=1)  # the paper recipe keeps its own rule: stop at the budget
    loop.cfg = paper
    assert not loop.done(0, 58.1) and loop.done(0, 60.0)


# ---- recipe resolution ----
def test_the_paper_recipe_is_the_previous_default():
    cfg = TrainConfig(data="d", out="o")
    assert (cfg.recipe, cfg.objective, cfg.batch_size, cfg.lr, cfg.warmup, cfg.weight_decay, cfg.dropout) == (
        "paper", "mlm+nsp", 32, 1e-4, 0.01, 0.01, None)
    assert not TrainConfig(data="d", out="o", minutes=1).time_schedule


def test_the_budget_recipe_fills_what_the_caller_left_unset():
    cfg = TrainConfig(data="d", out="o", recipe="budget", minutes=2)
    assert {k: getattr(cfg, k) for k in RECIPES["budget"]} == RECIPES["budget"]
    assert cfg.dropout == 0.0 and cfg.objective == "mlm" and cfg.lr > 1e-4
    assert cfg.time_schedule
    assert not TrainConfig(data="d", out="o", recipe="budget", steps=10).time_schedule


def test_explicit_values_win_over_the_recipe():
    cfg = TrainConfig(data="d", out="o", recipe="budget", lr=3e-4, objective="mlm+nsp", dropout=0.05, batch_size=8)
    assert (cfg.lr, cfg.objective, cfg.dropout, cfg.batch_size) == (3e-4, "mlm+nsp", 0.05, 8)
    assert cfg.warmup == RECIPES["budget"]["warmup"]  # what was not given still comes from the recipe


def test_precision_comes_from_the_recipe_and_auto_follows_the_hardware(monkeypatch):
    from bertkit import devices

    assert TrainConfig(data="d", out="o").precision == "fp32"
    assert TrainConfig(data="d", out="o", recipe="budget").precision == "auto"
    assert TrainConfig(data="d", out="o", recipe="budget", precision="fp32").precision == "fp32"  # the user's wins
    cpu = torch.device("cpu")
    for has_bf16, expected in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(devices, "cpu_has_bf16", lambda has_bf16=has_bf16: has_bf16)
        assert devices.resolve_precision("auto", cpu) == expected
        assert devices.resolve_precision("fp32", cpu) == "fp32" and devices.resolve_precision("bf16", cpu) == "bf16"
    assert devices.resolve_precision("auto", torch.device("mps")) == "fp32"
    with pytest.raises(UserError, match="precision must be one of fp32, bf16, auto"):
        TrainConfig(data="d", out="o", precision="fp16")


def test_cpu_bf16_detection_reads_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    from bertkit import devices

    real_open = builtins.open
    for held in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):  # the suite may run held to AVX2 itself
        monkeypatch.delenv(held, raising=False)
    for flags, expected in (("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16 amx_tile", True),
                            ("fpu avx2 avx512f avx512bw", False)):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda path, *a, cpuinfo=cpuinfo, **k: real_open(
            cpuinfo if path == "/proc/cpuinfo" else path, *a, **k))
        assert devices.cpu_has_bf16() is expected
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n")
    assert devices.cpu_has_bf16() is True
    for held, value in (("ATEN_CPU_CAPABILITY", "avx2"), ("ONEDNN_MAX_CPU_ISA", "AVX2")):  # a bf16 CPU held to AVX2
        monkeypatch.setenv(held, value)
        assert devices.cpu_has_bf16() is False
        monkeypatch.delenv(held)
    monkeypatch.setattr(builtins, "open", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError(a[0])))
    assert devices.cpu_has_bf16() is False  # no /proc (macOS, Windows): fp32


def test_an_unknown_recipe_or_dropout_is_a_user_error():
    with pytest.raises(UserError, match="recipe must be one of paper, budget"):
        TrainConfig(data="d", out="o", recipe="fast")
    with pytest.raises(UserError, match="dropout"):
        TrainConfig(data="d", out="o", dropout=1.0)


def test_the_help_text_shows_the_recipes_real_values():
    from bertkit.cli.pretrain import RECIPES as RECIPE_DEFAULTS
    from bertkit.cli.pretrain import recipe_help

    assert RECIPE_DEFAULTS == RECIPES
    # the CLI imports the one table, and each flag's help quotes that table's values
    for field in ("lr", "adam_beta2", "init", "objective"):
        assert recipe_help(field) == f"(default: paper {RECIPES['paper'][field]}, budget {RECIPES['budget'][field]})"


# ---- the budget recipe's initialisation and AdamW beta2 ----
def test_scaled_init_draws_at_the_width_scale_with_a_sinusoidal_position_table():
    from bertkit.pretrain.init import initialise, sinusoids

    config = BertConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=96, max_position_embeddings=32)
    torch.manual_seed(0)
    bert = BertForMaskedLM(config)
    torch.manual_seed(0)
    scaled = initialise(BertForMaskedLM(config), "scaled")
    std = 64 ** -0.5
    for (name, a), (_, b) in zip(bert.named_parameters(), scaled.named_parameters()):
        if "position" in name:
            assert torch.allclose(b, sinusoids(32, 64) * std * 2 ** 0.5)
            # neighbouring positions start alike, distant ones less so
            cos = torch.nn.functional.cosine_similarity(b[10:11], b, dim=-1)
            assert cos[11] > cos[14] > cos[20] and cos[9] > cos[6]
        elif a.ndim == 2:  # every other weight matrix and embedding: N(0, 1/sqrt(hidden)) instead of N(0, 0.02)
            assert a.std().item() == pytest.approx(0.02, rel=0.2), name
            assert b.std().item() == pytest.approx(std, rel=0.2), name
        else:  # biases and LayerNorms as BERT's
            assert torch.equal(a, b), name
    assert scaled.mlm.word_embeddings.weight is scaled.encoder.embeddings.word.weight  # still tied
    assert scaled.config.initializer_range == 0.02  # the saved config (new fine-tuning heads) is BERT's
    assert initialise(bert, "bert") is bert


def test_the_runs_init_and_beta2_reach_the_model_and_the_optimizer(pretraining_data):
    from bertkit.pretrain.build import build_model
    from bertkit.pretrain.setup import open_data

    def built(recipe: str, **kw):
        cfg = TrainConfig(data=str(pretraining_data / "packed"), out="o", recipe=recipe, objective="mlm",
                          config_overrides=TINY, **kw)
        model, optimizer = build_model(cfg, open_data(cfg)[0].manifest, None, torch.device("cpu"))
        return model.encoder.embeddings.position.weight, optimizer.param_groups[0]["betas"]

    (paper_pos, paper_betas), (budget_pos, budget_betas) = built("paper"), built("budget")
    assert paper_betas == (0.9, 0.999) and budget_betas == (0.9, RECIPES["budget"]["adam_beta2"])
    assert paper_pos.std().item() == pytest.approx(0.02, rel=0.2)
    assert budget_pos[0, 1].item() == pytest.approx(TINY["hidden_size"] ** -0.5 * 2 ** 0.5)  # cos(0), scaled
    assert built("budget", init="bert", adam_beta2=0.95)[1] == (0.9, 0.95)  # the caller's values win
    with pytest.raises(UserError, match="init must be one of"):
        TrainConfig(data="d", out="o", init="xavier")
    with pytest.raises(UserError, match="adam_beta2"):
        TrainConfig(data="d", out="o", adam_beta2=1.0)


# ---- dropout for the run only ----
def test_set_dropout_turns_every_dropout_off_but_keeps_the_config():
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=16, hidden_dropout_prob=0.3,
                        attention_probs_dropout_prob=0.3)
    torch.manual_seed(0)
    model = BertForMaskedLM(config).train()
    ids = torch.randint(5, 99, (3, 7))

    def hidden():
        return model.encoder(ids).last_hidden_state

    assert not torch.equal(hidden(), hidden())  # dropout on: two passes differ
    set_dropout(model, 0.0)
    assert torch.equal(hidden(), hidden())
    assert model.config.hidden_dropout_prob == 0.3 and model.config.attention_probs_dropout_prob == 0.3


# ---- end to end ----
def _budget_args(data: Path, out: Path, minutes: float, *extra: str) -> list[str]:
    return ["pretrain", "--data", str(data), "--out", str(out), "--preset", "tiny", "--recipe", "budget",
            "--minutes", str(minutes), "--config-json", json.dumps(TINY), "--log-every", "1",
            "--eval-every", "100000", "--eval-samples", "8", *extra]


def _train_records(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "train"]


def test_budget_recipe_stops_on_time_with_lr_near_zero_and_writes_a_model_that_loads(pretraining_data, tmp_path):
    out, minutes = tmp_path / "run", 0.05
    p = run(_budget_args(pretraining_data / "packed", out, minutes))
    assert p.returncode == 0, p.stderr
    train = _train_records(out)
    budget, peak = minutes * 60, RECIPES["budget"]["lr"]
    assert len(train) > 10
    assert 0.7 * budget < train[-1]["elapsed"] < budget + 1.0  # stopped at the deadline, not a step count
    assert 0 < max(r["lr"] for r in train) <= peak
    assert train[-1]["lr"] < 0.05 * peak  # and decayed to ~0 by the end (one step is ~1% of this budget)
    warmup = RECIPES["budget"]["warmup"]
    for before, r in itertools.pairwise(train):  # each step's lr is the clock's, taken when the step began or later
        if before["elapsed"] > warmup * budget:
            assert r["lr"] <= lr_at_time(before["elapsed"], budget, warmup, peak) + 1e-12, r
    saved = json.loads((out / "config.json").read_text())
    assert saved["train"]["recipe"] == "budget" and saved["train"]["dropout"] == 0.0
    assert saved["train"]["objective"] == "mlm"
    from bertkit.devices import resolve_precision

    assert saved["train"]["precision"] == resolve_precision("auto", torch.device("cpu"))  # recorded as resolved
    import transformers

    hf = transformers.BertForMaskedLM.from_pretrained(out / "model")
    assert hf.config.hidden_dropout_prob == 0.1  # the saved model keeps dropout for fine-tuning
    assert hf.config.hidden_size == TINY["hidden_size"]


def test_a_resumed_budget_run_continues_the_same_clock(pretraining_data, tmp_path):
    out, minutes = tmp_path / "run", 0.1
    p = run(_budget_args(pretraining_data / "packed", out, minutes, "--save-every", "10", "--keep", "0"))
    assert p.returncode == 0, p.stderr
    budget = minutes * 60
    checkpoints = sorted((out / "checkpoints").iterdir())
    states = [json.loads((c / "trainer_state.json").read_text()) for c in checkpoints]
    middle = min(range(len(states)), key=lambda i: abs(states[i]["elapsed"] - budget / 2))
    resumed_from = states[middle]
    for later in checkpoints[middle + 1:]:  # as if the run had been stopped at the middle checkpoint
        shutil.rmtree(later)
    shutil.rmtree(out / "model")
    p = run(_budget_args(pretraining_data / "packed", out, minutes, "--save-every", "10", "--keep", "0", "--resume"))
    assert p.returncode == 0, p.stderr
    after = [r for r in _train_records(out) if r["step"] > resumed_from["step"]]
    assert after[0]["elapsed"] >= resumed_from["elapsed"]  # the clock went on from the checkpoint's time
    # A schedule restarted from zero would run another full budget after the checkpoint.
    assert after[-1]["elapsed"] < budget + 1.0
    assert after[-1]["lr"] < 0.05 * RECIPES["budget"]["lr"]
    assert after[0]["lr"] < RECIPES["budget"]["lr"]  # mid-decay, not a fresh warm-up to the peak
