"""ELECTRA's replaced-token detection (`bertkit pretrain --objective electra`, bertkit.electra).

- the models against transformers, offline: a random ElectraForPreTraining (the discriminator)
  and ElectraForMaskedLM (the generator, E != C, a non-GELU encoder under its exact-GELU head)
  load strictly, give every layer's hidden states, the logits, the loss and every gradient to
  1e-5, and save back the very same tensors;
- the objective's steps: the RTD loss on a hand-computed example; a generator forced to a one-hot
  on the original token gives all-original labels, forced to another token replaced labels at
  exactly the masked positions; sampling follows the softmax and sends no gradient back;
- a run: the shared embeddings stay one tensor (after a step, a checkpoint round trip, a
  resume); a SIGKILLed run resumes bit for bit; the saved RUN/model, RUN/discriminator and
  RUN/generator load strictly in transformers and score as bertkit does; a tiny run learns;
  `--init-from` continues a BERT with RTD; two processes compute what one does.
"""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel, ElectraForPreTraining, Tokenizer
from bertkit.cli import main
from bertkit.electra import ElectraPretraining, generator_config, replace_tokens, rtd_loss, sample_tokens
from bertkit.errors import UserError
from bertkit.train.checkpoint import latest_checkpoint
from pretrain_helpers import TINY, assert_bit_identical, start, tiny_args, weights
from test_parity import B, T, V, assert_close, compare_grads, compare_hidden, make_batch, randomize, token_labels

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

FP32 = ("--precision", "fp32")


# ---- the models, against transformers ----
def load_electra(tmp_path, hf_name: str, ours: type, seed: int, **changes):
    """A random transformers ELECTRA model saved to disk, and our model loaded from it."""
    kw = dict(vocab_size=V, embedding_size=24, hidden_size=32, num_attention_heads=4, intermediate_size=37,
              num_hidden_layers=2, max_position_embeddings=64, initializer_range=0.2, attn_implementation="eager")
    torch.manual_seed(seed)
    ref = randomize(getattr(transformers, hf_name)(transformers.ElectraConfig(**{**kw, **changes})), seed)
    ref.save_pretrained(tmp_path)
    return ours.from_pretrained(tmp_path).eval(), ref


def assert_same_step(ours, ref, batch, labels, what: str, labelled_only: bool = False) -> None:
    """One labelled forward and backward: every layer's hidden states, the logits (transformers'
    at the labelled positions only, for our sparse MLM head), the loss and every gradient."""
    ours.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    a, b = (m(**batch, labels=labels, output_hidden_states=True) for m in (ours, ref))
    compare_hidden(a.hidden_states, b.hidden_states)
    assert_close(a.logits, b.logits[labels != -100] if labelled_only else b.logits, f"{what} logits")
    assert_close(a.loss, b.loss, f"{what} loss")
    (a.loss + b.loss).backward()  # two graphs that share nothing: each model gets its own loss's gradient
    compare_grads(ours, ref)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "no-mask"])
def test_discriminator_matches_transformers(tmp_path, padded):
    ours, ref = load_electra(tmp_path, "ElectraForPreTraining", ElectraForPreTraining, 0)  # E 24 -> C 32
    assert ours.load_report == {"initialized": [], "skipped": []} and ours.encoder.pooler is None
    batch = make_batch(11, padded)
    labels = (torch.rand(B, T, generator=torch.Generator().manual_seed(12)) < 0.3).long()
    assert_same_step(ours, ref, batch, labels, "RTD")  # the loss: BCE over attention_mask == 1


def test_generator_matches_transformers(tmp_path):
    """Embeddings wider than the layers (ELECTRA-Base's generator); the layers' activation is relu
    while the generator head's stays the exact GELU, as transformers' ElectraGeneratorPredictions."""
    ours, ref = load_electra(tmp_path, "ElectraForMaskedLM", BertForMaskedLM, 1, embedding_size=48, hidden_act="relu")
    assert ours.load_report == {"initialized": [], "skipped": []}
    assert ours.mlm.word_embeddings.weight is ours.encoder.embeddings.word.weight
    for padded in (True, False):
        batch = make_batch(13, padded)
        assert_same_step(ours, ref, batch, token_labels(batch, V, seed=14), "generator MLM", labelled_only=True)


def test_the_projection_is_in_every_path_of_the_one_forward():
    """Padded, unpadded, last-layer rows and the export's fused attention give the same outputs
    with embeddings narrower than the layers."""
    torch.manual_seed(0)
    model = randomize(BertModel(BertConfig(vocab_size=V, **{**TINY, "max_position_embeddings": 16},
                                           embedding_size=24)), 0)
    assert model.embed_proj is not None and model.embeddings.word.weight.shape[1] == 24
    batch = make_batch(15)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        padded = model(**batch).last_hidden_state
        model.unpad = True
        assert_close(model(**batch).last_hidden_state[real], padded[real], "unpadded")
        model.unpad = False
        rows = real.reshape(-1).nonzero().squeeze(1)
        assert_close(model(**batch, rows=rows).last_hidden_state, padded.reshape(-1, 32)[rows], "last-layer rows")
        model.fused_attention = True
        assert_close(model(**batch).last_hidden_state[real], padded[real], "fused attention (export)")


@pytest.mark.parametrize("hf_name, ours", [("ElectraForPreTraining", ElectraForPreTraining),
                                           ("ElectraForMaskedLM", BertForMaskedLM)])
def test_transformers_electra_dir_round_trips_exactly(tmp_path, hf_name, ours):
    load_electra(tmp_path / "hf", hf_name, ours, 2)
    ours.from_pretrained(tmp_path / "hf").save_pretrained(tmp_path / "ours")
    a, b = weights(tmp_path / "hf"), weights(tmp_path / "ours")
    assert sorted(a) == sorted(b)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    saved = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert saved["architectures"] == [hf_name] and saved["model_type"] == "electra" and saved["embedding_size"] == 24


# ---- the objective's steps ----
def test_rtd_loss_on_a_hand_computed_example():
    logits = torch.tensor([[2.0, -1.0, 0.0], [0.5, 3.0, 9.0]])
    labels = torch.tensor([[1, 0, 0], [0, 1, 1]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last position is padding: not counted
    # BCE with logits: log(1 + e^-z) for a replaced token, log(1 + e^z) for an original one
    terms = [math.log1p(math.exp(-2.0)), math.log1p(math.exp(-1.0)), math.log(2.0), math.log1p(math.exp(0.5)),
             math.log1p(math.exp(-3.0))]
    assert rtd_loss(logits, labels, mask).item() == pytest.approx(sum(terms) / 5, abs=1e-6)
    assert rtd_loss(logits, labels, mask, "sum").item() == pytest.approx(sum(terms), abs=1e-6)
    with_pad = sum(terms) + math.log1p(math.exp(-9.0))
    assert rtd_loss(logits, labels, None).item() == pytest.approx(with_pad / 6, abs=1e-6)  # no mask: every position


def _tiny_pair(seed: int = 0) -> ElectraPretraining:
    torch.manual_seed(seed)
    return ElectraPretraining.new(BertConfig(vocab_size=V, **{**TINY, "max_position_embeddings": 16}), 0.25)


def _masked_batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    chosen = torch.rand(B, T, generator=g) < 0.3
    chosen[0, 1] = True
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    masked = torch.where(chosen, torch.full_like(ids, 4), ids)  # [MASK] at every chosen position
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    return ids, masked, labels, mask


@pytest.mark.parametrize("forced", ["original", "other"])
def test_a_forced_generator_gives_exactly_the_expected_labels(forced, monkeypatch):
    """A generator whose softmax is a one-hot on the original token labels every position
    original, even where it was masked; one on another token labels exactly the masked positions
    replaced. Through the pair's own forward, with only the generator's head forced."""
    model = _tiny_pair()
    ids, masked, labels, mask = _masked_batch(3)
    originals = labels[labels != -100]  # (N,), the rows of the head's logits
    target = originals if forced == "original" else torch.where(originals == 5, 6, 5)
    forced_logits = torch.full((len(target), V), -1e4).scatter(1, target[:, None], 0.0)  # exp(-1e4) == 0
    monkeypatch.setattr(model.generator.mlm, "forward", lambda h: forced_logits + 0 * h.sum())
    uniforms = torch.rand(B, T, generator=torch.Generator().manual_seed(4))
    out = model(masked, mask, None, labels, uniforms)
    expected = torch.zeros_like(ids) if forced == "original" else (labels != -100).long()
    assert torch.equal(out.replaced, expected)
    corrupted, replaced = replace_tokens(masked, labels, target)
    assert torch.equal(replaced, expected)
    assert torch.equal(corrupted[labels == -100], ids[labels == -100])  # unmasked positions keep their token
    assert torch.equal(corrupted, ids if forced == "original" else torch.where(labels != -100, corrupted, ids))


def test_sampling_follows_the_softmax_and_sends_no_gradient_to_the_generator():
    probs = torch.tensor([0.2, 0.5, 0.0, 0.3])
    logits = probs.clamp(min=1e-30).log().expand(20000, 4)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(5))
    counts = torch.bincount(sample_tokens(logits, u), minlength=4) / 20000
    assert (counts - probs).abs().max() < 0.01 and counts[2] == 0, counts
    assert sample_tokens(logits[:3], torch.tensor([0.0, 0.2, 0.9999999])).tolist() == [0, 1, 3]  # the CDF's edges
    model = _tiny_pair()
    _, masked, labels, mask = _masked_batch(6)
    out = model(masked, mask, None, labels, torch.rand(B, T, generator=torch.Generator().manual_seed(7)))
    out.rtd_loss.backward()  # the discriminator's loss alone
    generator_own = [p for n, p in model.generator.named_parameters() if not n.startswith("encoder.embeddings.")]
    assert all(p.grad is None for p in generator_own), "a gradient reached the generator through its samples"
    assert model.discriminator.encoder.embeddings.word.weight.grad is not None  # the shared embeddings learn from it


def test_the_generator_is_a_fraction_of_the_width_with_whole_heads():
    def shape(config, width):
        g = generator_config(config, width)
        return g.hidden_size, g.num_attention_heads, g.intermediate_size, g.num_hidden_layers, g.embedding_size

    assert shape(BertConfig.preset("base"), 1 / 3) == (256, 4, 1024, 12, 768)  # ELECTRA-Base's generator
    small = BertConfig(hidden_size=256, num_attention_heads=4, intermediate_size=1024, num_hidden_layers=12)
    assert shape(small, 1 / 4) == (64, 1, 256, 12, 256)  # ELECTRA-Small's
    assert shape(BertConfig(vocab_size=V, **TINY), 1 / 4) == (8, 1, 9, 2, 32)  # odd sizes: at least one head
    projected = BertConfig(vocab_size=V, **TINY, embedding_size=16)  # ELECTRA-Small's discriminator projects its own
    assert shape(projected, 1 / 4)[-1] == 16  # the shared embeddings' width
    with pytest.raises(UserError, match="as wide as the discriminator"):
        generator_config(BertConfig(vocab_size=V, **TINY), 0.99)


# ---- runs ----
def _electra_args(data: Path, out: Path, *extra: str) -> list[str]:
    return tiny_args(data, out, "--objective", "electra", *FP32, *extra)


@pytest.fixture(scope="module")
def learned(pretraining_data, tmp_path_factory) -> Path:
    """A tiny budget-recipe run on the packed toy corpus (150 steps, ~5 s)."""
    out = tmp_path_factory.mktemp("electra") / "run"
    args = _electra_args(pretraining_data / "packed", out, "--recipe", "budget", "--lr", "3e-3", "--steps", "150",
                         "--eval-every", "50", "--log-every", "50", "--eval-samples", "54", "--save-every", "150")
    assert main(args) == 0
    return out


def _real_batch(pretraining_data) -> dict[str, torch.Tensor]:
    from bertkit.data import PretrainingDataset

    val = PretrainingDataset(pretraining_data / "nsp", split="val")
    batch = val.batch(list(range(9)))
    return {k: torch.as_tensor(batch[k]).long() for k in ("input_ids", "attention_mask", "token_type_ids")}


def test_a_tiny_run_learns(learned, pretraining_data):
    records = [json.loads(s) for s in (learned / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r["kind"] == "val"]
    assert [r["step"] for r in val] == [0, 50, 100, 150]
    assert val[-1]["rtd_loss"] < 0.5 * val[0]["rtd_loss"] and val[-1]["mlm_loss"] < val[0]["mlm_loss"]
    assert {"mlm_accuracy", "replaced_accuracy", "original_accuracy"} <= val[-1].keys()
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["loss"] == pytest.approx(train[-1]["mlm_loss"] + 50 * train[-1]["rtd_loss"], rel=1e-5)
    # The discriminator beats the all-original baseline on validation data it never saw, corrupted
    # by the trained generator with the run's own masking.
    from bertkit.pretrain.build import build_objective
    from bertkit.pretrain.setup import TrainConfig, open_data

    cfg = TrainConfig(data=str(pretraining_data / "packed"), out="o", objective="electra")
    _, val_data, tokenizer = open_data(cfg)
    objective = build_objective(cfg, val_data.manifest, tokenizer)
    model = ElectraPretraining.from_pretrained(latest_checkpoint(learned).path).eval()
    correct = baseline = seen = 0
    for number in range(4):
        inputs = objective.prepare(val_data.batch(list(range(number * 13, number * 13 + 13))), torch.device("cpu"),
                                   99, number)
        with torch.no_grad():
            out = objective.loss_sums(model, inputs, accuracy=True)
        correct += (out["replaced_correct"] + out["original_correct"]).item()
        baseline += out["original_seen"].item()
        seen += (out["replaced_seen"] + out["original_seen"]).item()
    assert correct > baseline + 0.2 * (seen - baseline), (correct, baseline, seen)  # a fifth of the replaced found


def test_saved_folders_load_strictly_in_transformers_and_score_as_bertkit(learned, pretraining_data):
    x = _real_batch(pretraining_data)
    assert x["attention_mask"].min() == 0  # padded rows among them
    cases = (("discriminator", ElectraForPreTraining, "ElectraForPreTraining", "logits"),
             ("generator", BertForMaskedLM, "ElectraForMaskedLM", "logits"),
             ("model", BertModel, "BertModel", "last_hidden_state"))
    with torch.no_grad():
        for name, ours_cls, hf_cls, field in cases:
            ref, info = getattr(transformers, hf_cls).from_pretrained(learned / name, output_loading_info=True)
            assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info
            ours = ours_cls.from_pretrained(learned / name).eval()
            a, b = ours(**x), ref.eval()(**x, output_hidden_states=True)
            real = x["attention_mask"].bool()
            assert_close(getattr(a, field)[real], getattr(b, field)[real], f"RUN/{name} {field}")
            if name == "model":
                assert_close(a.pooler_output, b.pooler_output, "RUN/model pooler")
                compare_hidden(ours(**x, output_hidden_states=True).hidden_states, b.hidden_states)
    assert json.loads((learned / "model" / "config.json").read_text())["model_type"] == "bert"
    disc, bert = weights(learned / "discriminator"), weights(learned / "model")  # one encoder in both
    assert all(torch.equal(t, bert[k.removeprefix("electra.")]) for k, t in disc.items() if k.startswith("electra."))
    word = "electra.embeddings.word_embeddings.weight"
    assert torch.equal(weights(learned / "generator")[word], disc[word])


def test_the_saved_folders_work_with_fill_mask_and_info(learned, capsys):
    text = "the old cat [MASK] the dog near the river ."
    assert main(["fill-mask", "--model", str(learned / "generator"), text]) == 0
    assert "[MASK]" in capsys.readouterr().out
    assert main(["fill-mask", "--model", str(learned / "discriminator"), "the [MASK] ."]) == 2
    assert "no masked-LM head" in capsys.readouterr().err
    described = {}
    for name in ("model", "discriminator", "generator"):
        assert main(["info", "--json", str(learned / name)]) == 0
        described[name] = json.loads(capsys.readouterr().out)
    assert described["model"]["architectures"] == ["BertModel"] and described["model"]["heads"] == ["pooler"]
    assert described["discriminator"]["heads"] == ["replaced-token detection"]
    assert described["generator"]["architectures"] == ["ElectraForMaskedLM"]
    assert described["generator"]["heads"] == ["masked-LM"] and described["generator"]["config"]["embedding_size"] == 32


def test_shared_embeddings_stay_one_tensor(learned, pretraining_data):
    def shared(model: ElectraPretraining) -> bool:
        word = model.discriminator.encoder.embeddings.word.weight
        return (model.generator.encoder.embeddings is model.discriminator.encoder.embeddings
                and model.generator.encoder.embeddings.word.weight.data_ptr() == word.data_ptr()
                and model.generator.mlm.word_embeddings.weight.data_ptr() == word.data_ptr())

    model = _tiny_pair()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    assert len({id(p) for p in params}) == len(params)  # each tensor once, the embeddings included
    _, masked, labels, mask = _masked_batch(8)
    out = model(masked, mask, None, labels, torch.rand(B, T, generator=torch.Generator().manual_seed(9)))
    before = model.discriminator.encoder.embeddings.word.weight.detach().clone()
    (out.mlm_loss + 50 * out.rtd_loss).backward()
    optimizer.step()
    assert shared(model) and not torch.equal(before, model.discriminator.encoder.embeddings.word.weight)
    checkpoint = latest_checkpoint(learned)
    assert shared(ElectraPretraining.from_pretrained(checkpoint.path))  # a checkpoint round trip
    assert not any(k.startswith("electra.embeddings.") for k in weights(checkpoint.path / "generator"))  # saved once
    from bertkit.pretrain.build import build_model
    from bertkit.pretrain.setup import TrainConfig, open_data

    cfg = TrainConfig(data=str(pretraining_data / "packed"), out=str(learned), objective="electra", resume=True,
                      config_overrides=TINY)
    resumed, optimizer = build_model(cfg, open_data(cfg)[0].manifest, checkpoint, torch.device("cpu"))
    assert shared(resumed)  # as a resumed run builds it, its optimizer restored
    assert len(optimizer.state) == len(list(resumed.parameters()))


STEPS = ("--steps", "24", "--save-every", "4", "--eval-samples", "0", "--log-every", "4", "--keep", "2")


def test_sigkill_then_resume_is_bit_identical(pretraining_data, tmp_path, one_thread):
    """Sentence-pair data (NSP labels ignored), dropout on: every saved folder equal to the bit."""
    data = pretraining_data / "nsp"
    killed = tmp_path / "killed"
    proc = start(_electra_args(data, killed, *STEPS))
    reference = tmp_path / "reference"  # the uninterrupted run, in this process while the child starts
    assert main(_electra_args(data, reference, *STEPS)) == 0
    deadline = time.monotonic() + 120
    while latest_checkpoint(killed) is None and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and not (killed / "model").exists()
    assert 4 <= latest_checkpoint(killed).step < 24
    assert main(_electra_args(data, killed, *STEPS, "--resume")) == 0
    for name in ("model", "discriminator", "generator"):
        assert_bit_identical(reference / name, killed / name)


def test_init_from_continues_a_bert_with_rtd(pretraining_data, tmp_path, capsys):
    tok = Tokenizer.from_pretrained(pretraining_data / "tok")
    torch.manual_seed(7)
    BertForPreTraining(BertConfig(vocab_size=len(tok), **TINY)).save_pretrained(tmp_path / "init", tokenizer=tok)
    out = tmp_path / "run"
    args = ["pretrain", "--data", str(pretraining_data / "packed"), "--out", str(out), "--objective", "electra",
            "--init-from", str(tmp_path / "init"), "--batch-size", "13", "--steps", "2", "--lr", "1e-9",
            "--warmup", "0", "--eval-samples", "0", *FP32]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"initialised from {tmp_path / 'init'}: encoder loaded; new: a generator (2 layers, hidden 8) "
                     "sharing its embeddings, replaced-token detection; not used: masked-LM, next-sentence, pooler")
    before, after = weights(tmp_path / "init"), weights(out / "model")
    assert all((after[k.removeprefix("bert.")] - t).abs().max() < 1e-6 for k, t in before.items()
               if k.startswith("bert.") and "pooler" not in k)
    record = json.loads((out / "config.json").read_text())
    assert record["train"]["init_from"] == str(tmp_path / "init") and record["train"]["rtd_weight"] == 50


def test_two_processes_match_one(pretraining_data, tmp_path):
    data = pretraining_data / "packed"
    args = ("--steps", "4", "--batch-size", "12", "--grad-accum", "2", "--log-every", "2", "--eval-samples", "0")
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m")
    proc = start(tiny_args(data, tmp_path / "two", "--objective", "electra", *FP32, *args, **no_dropout), *launcher)
    assert main(tiny_args(data, tmp_path / "one", "--objective", "electra", *FP32, *args, **no_dropout)) == 0
    stdout, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 0, stderr[-3000:]
    assert "2 process(es)" in stdout and stdout.count("done: 4 steps") == 1

    def train_records(out):
        return [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in s]

    for a, b in zip(train_records(tmp_path / "one"), train_records(tmp_path / "two")):
        for key in ("loss", "mlm_loss", "rtd_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), key
        assert a["replaced_accuracy"] == b["replaced_accuracy"]  # the same samples on either split
    for name in ("discriminator", "generator"):
        wa, wb = weights(tmp_path / "one" / name), weights(tmp_path / "two" / name)
        # As tests/test_ddp.py: 1e-5 relative plus 1% of one Adam step where gradients vanish.
        worst = max(((wa[k] - wb[k]).abs() - 1e-5 * wa[k].abs()).max().item() for k in wa)
        assert worst <= 2e-5, f"{name}: weights differ by {worst:.3g}"



# ---- gradient-disentangled embedding sharing (DeBERTaV3), generator depth, the replaced-token AUC ----
def test_gdes_sends_no_rtd_gradient_into_the_shared_table_and_the_mlm_loss_does():
    """E_D = sg(E_G) + E_delta: the discriminator's loss reaches E_delta only (autograd), the
    generator's loss reaches E_G; E_delta starts at zero, so the first step's inputs equal tied sharing's."""
    tied = _tiny_pair(3).eval()
    pair = _tiny_pair(3).disentangle().eval()
    _ids, masked, labels, mask = _masked_batch(4)
    u = torch.rand(B, T, generator=torch.Generator().manual_seed(5))
    out, ref = pair(masked, mask, labels=labels, uniforms=u), tied(masked, mask, labels=labels, uniforms=u)
    assert torch.equal(out.rtd_logits, ref.rtd_logits)  # delta is zero: the same discriminator inputs
    shared = pair.generator.encoder.embeddings.word.weight
    delta = pair.discriminator.encoder.embeddings.delta
    rtd_grads = torch.autograd.grad(out.rtd_loss, [shared, delta], allow_unused=True)
    assert rtd_grads[0] is None or not rtd_grads[0].any(), "the RTD loss moved the generator's table"
    assert rtd_grads[1].abs().sum() > 0
    mlm_grads = torch.autograd.grad(out.mlm_loss, [shared, delta], allow_unused=True)
    assert mlm_grads[0].abs().sum() > 0 and (mlm_grads[1] is None or not mlm_grads[1].any())


def test_generator_depth_is_its_own():
    config = BertConfig(vocab_size=V, **{**TINY, "num_hidden_layers": 4})
    assert generator_config(config, 0.25, 2).num_hidden_layers == 2
    assert generator_config(config, 0.25).num_hidden_layers == 4


def test_roc_auc_from_histograms_is_the_rank_statistic():
    import numpy as np

    from bertkit.pretrain.objective import AUC_BINS, _histogram, roc_auc

    rng = np.random.default_rng(0)
    pos, neg = rng.beta(3, 2, 400), rng.beta(2, 3, 600)
    exact = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (400 * 600)
    got = roc_auc(_histogram(torch.tensor(pos)).tolist(), _histogram(torch.tensor(neg)).tolist())
    assert abs(got - exact) < 2 / AUC_BINS * 2  # ties within a bin counted half
    assert roc_auc([0, 5], [5, 0]) == 1.0 and roc_auc([5, 0], [0, 5]) == 0.0 and roc_auc([1, 1], [0, 0]) == 0.5


def test_a_gdes_run_saves_a_whole_discriminator_and_resumes_bit_for_bit(pretraining_data, tmp_path):
    """--embedding-sharing gdes: RUN/discriminator loads strictly in transformers' ElectraForPreTraining with
    the same logits as the pair's merged discriminator; validation reports the replaced-token AUC;
    a run stopped at a checkpoint and resumed ends with the same folders as an uninterrupted one."""
    import shutil

    data = pretraining_data / "packed"
    extra = ("--embedding-sharing", "gdes", "--generator-layers", "1", "--steps", "12", "--save-every", "6",
             "--eval-every", "6", "--eval-samples", "8", "--log-every", "6", "--keep", "0")
    assert main(_electra_args(data, tmp_path / "whole", *extra)) == 0
    shutil.copytree(tmp_path / "whole", tmp_path / "half")  # as if stopped right after its step-6 checkpoint
    for later in ("model", "discriminator", "generator", "checkpoints/step-0000012"):
        shutil.rmtree(tmp_path / "half" / later)
    assert main(_electra_args(data, tmp_path / "half", *extra, "--resume")) == 0
    for name in ("model", "discriminator", "generator"):
        assert_bit_identical(tmp_path / "whole" / name, tmp_path / "half" / name)
    val = [json.loads(s) for s in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["rtd_auc"] <= 1.0 for r in val if r["kind"] == "val")
    ref, info = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "whole" / "discriminator",
                                                                   output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = ElectraForPreTraining.from_pretrained(tmp_path / "whole" / "discriminator").eval()
    batch = _real_batch(pretraining_data)
    assert_close(ours(**batch).logits, ref.eval()(**batch).logits, "gdes discriminator logits")
    assert generator_config(ours.config, 0.25, 1).num_hidden_layers == 1
    saved = json.loads((tmp_path / "whole" / "generator" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1
