"""`bertkit bench`: time bertkit against transformers on the same weights, in one process.

    bertkit bench --device cpu --cases infer-base-s128,pretrain-mini-s128-b32 --repeats 7 --json bench.json

Each case checks that both implementations give the same outputs, then times them alternately
and reports the medians: sequences/s, tokens/s, useful TFLOP/s, MFU, peak memory and the ratio
bertkit / transformers. `--cases list` prints the cases. transformers must be installed
(`pip install 'bertkit[test]'`); it is never a dependency of bertkit itself.
"""

from __future__ import annotations

from bertkit.cli.args import add_overwrite, check_output_file, device_name, nonnegative_int, positive_int


def add_arguments(parser) -> None:
    parser.add_argument("--device", type=device_name, default="auto", help="cpu, cuda or auto (cuda when available)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated case names (default: every case for the device); 'list' lists them")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed rounds per case (the median is reported)")
    parser.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed steps per implementation first")
    parser.add_argument("--json", default=None, metavar="FILE", help="write one JSON record per case here")
    add_overwrite(parser, "--json file")
    parser.add_argument("--compile", action="store_true", help="torch.compile bertkit's model")
    parser.add_argument("--int8", action="store_true", help="quantize bertkit to int8 in the CPU inference cases")


def check(args) -> None:
    if args.json:
        check_output_file(args.json, "--json", args.overwrite)


def run(args) -> int:
    from bertkit.benchmark import CASES, Options, markdown_table, run_benchmarks, selected
    from bertkit.benchmark.spec import transformers_module
    from bertkit.devices import resolve_device

    if args.cases == "list":
        for spec in CASES.values():
            print(f"{spec.name:<26} {spec.kind:<9} {'/'.join(spec.devices)}")
        return 0
    device = resolve_device(args.device, allowed=("cpu", "cuda"))
    specs = selected(args.cases, device)
    transformers_module()  # fail early, with the install hint, before any work
    opts = Options(device=device, compile=args.compile, int8=args.int8)
    records, _ = run_benchmarks(specs, opts, args.repeats, args.warmup, on_record=_writer(args.json))
    print()
    print(markdown_table(records))
    if args.json:
        print(f"wrote {args.json}")
    return 0


def _writer(path: str | None):
    """Rewrite the JSON file after every case, so an interrupted run keeps its finished cases."""
    if path is None:
        return None
    from bertkit.io import write_json

    return lambda records, context: write_json(path, [{**r, "run": context} for r in records])
