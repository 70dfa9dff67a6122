"""`bertkit pretrain --data DATA_DIR --out RUN_DIR`: pretrain BERT (MLM + NSP, MLM only, or LTR).

Under `torchrun --nproc-per-node N` the same command trains data-parallel; --batch-size is the
global batch, split over processes and --grad-accum micro-steps, so results do not depend on N.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    a = parser.add_argument
    a("--data", required=True, help="folder written by `bertkit prepare`")
    a("--out", required=True, help="run folder: checkpoints/, model/, metrics.jsonl, loss.png, ...")
    a("--preset", default="mini", help="model shape: tiny, mini, small, medium, base, large (default mini)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="optimizer updates (default 1000)")
    length.add_argument("--minutes", type=float, help="train for this much wall-clock time instead")
    a("--objective", default="mlm+nsp", choices=("mlm+nsp", "mlm", "ltr"),
      help="mlm+nsp (BERT), mlm (no NSP), ltr (left-to-right, next token)")
    a("--batch-size", type=int, default=32, help="global batch in sequences (default 32)")
    a("--grad-accum", type=int, default=1, help="micro-steps per update (default 1)")
    a("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4)")
    a("--warmup", type=float, default=0.01, help="warm-up: below 1 a fraction of the run, else steps")
    a("--weight-decay", type=float, default=0.01)
    a("--mask-rate", type=float, default=0.15, help="fraction of tokens to predict (default 0.15)")
    a("--whole-word-mask", action="store_true", help="mask every piece of a chosen word")
    a("--mask-rule", default="80/10/10", metavar="M/R/K",
      help="of the chosen tokens, percent replaced by [MASK] / by a random token / kept (default 80/10/10)")
    a("--mask-all", action="store_true", help="ablation: chosen tokens always become [MASK] (--mask-rule 100/0/0)")
    a("--precision", default="fp32", choices=("fp32", "bf16"))
    a("--compile", action="store_true", help="torch.compile the model")
    a("--save-every", type=int, default=1000, help="steps between checkpoints")
    a("--eval-every", type=int, default=500, help="steps between validations")
    a("--log-every", type=int, default=10, help="steps between status lines")
    a("--eval-samples", type=int, default=512, help="validation sequences scored at each evaluation (0: no evaluation)")
    a("--keep", type=int, default=2, help="checkpoints to keep (default 2)")
    a("--seed", type=int, default=0)
    a("--resume", action="store_true", help="continue from RUN_DIR's newest complete checkpoint")
    a("--max-grad-norm", type=float, default=1.0, help="clip the gradient norm (0: no clipping)")
    a("--device", default="auto", choices=("auto", "cpu", "cuda"))
    a("--tokenizer", help="check that DATA_DIR was prepared with this tokenizer (folder with vocab.txt)")
    a("--config-json", help='model config overrides: a JSON object or a .json file, e.g. \'{"num_hidden_layers": 2}\'')


def run(args) -> int:
    from bertkit.pretrain.loop import pretrain
    from bertkit.pretrain.setup import TrainConfig, parse_overrides

    cfg = TrainConfig(
        data=args.data, out=args.out, preset=args.preset, steps=args.steps, minutes=args.minutes,
        objective=args.objective, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=args.lr,
        warmup=args.warmup, weight_decay=args.weight_decay, mask_rate=args.mask_rate,
        whole_word_mask=args.whole_word_mask, mask_rule="100/0/0" if args.mask_all else args.mask_rule, precision=args.precision,
        compile=args.compile, save_every=args.save_every, eval_every=args.eval_every,
        log_every=args.log_every, eval_samples=args.eval_samples, keep=args.keep, seed=args.seed,
        resume=args.resume, max_grad_norm=args.max_grad_norm, device=args.device,
        tokenizer=args.tokenizer, config_overrides=parse_overrides(args.config_json),
    )
    return pretrain(cfg)
