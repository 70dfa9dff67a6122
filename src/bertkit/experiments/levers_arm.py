"""One arm of the `levers` experiment in a process of its own: timed, or trained for its steps.

A process because the arm's kernels are chosen before torch loads: PyTorch, oneDNN and MKL are held
to AVX2 in fp32 (`AVX2`, the core the budget is counted on) unless the arm computes in bf16 on the
CPU's own kernels; and because two arms change how a new model is drawn (`random_positions`: a
learned position table drawn at random instead of the sinusoids; `residual_scale`: each layer's two
output maps drawn smaller), patches that must not outlive the arm.

    python -m bertkit.experiments.levers_arm JOB.json

JOB holds the arm's options (`levers.arm_job`); the process writes JOB's `out`/done.json: the CPU
seconds per step of each phase (timing), or each phase's steps and folder (training).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
DONE = "done.json"


def process_env(kernels: str) -> dict:
    """The arm's process environment: one thread, and the AVX2 limits unless `kernels` is "native"."""
    env = {k: v for k, v in os.environ.items() if k not in AVX2}
    env["OMP_NUM_THREADS"] = "1"
    return {**env, **(AVX2 if kernels == "avx2" else {})}


def spawn(job: dict, job_file: Path) -> dict:
    """Run `job` in its own process (its output in this one's stdout); the record it wrote."""
    from bertkit.io import read_json, write_json

    write_json(job_file, job)
    sys.stdout.flush()
    status = subprocess.run([sys.executable, "-m", "bertkit.experiments.levers_arm", str(job_file)],
                            env=process_env(job["kernels"]), stdout=sys.stdout, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise RuntimeError(f"the arm's process ended with status {status}; its output is above")
    return read_json(Path(job["out"]) / DONE, "an arm's record")


def _config(job: dict, out: Path, steps: int, phase: str, previous: Path | None, **extra):
    from bertkit.pretrain import TrainConfig

    options = dict(job["options"])
    if phase != "run":
        options["objective"] = phase
    if previous is not None:  # the second phase starts from the first one's model
        options["init_from"] = str(previous / "model")
    else:
        options.update(preset=job["preset"], config_overrides=dict(job["overrides"]))
    return TrainConfig(data=job["data"], out=str(out), recipe="budget", steps=steps, seed=job["seed"],
                       eval_every=10**9, eval_samples=0, log_every=10, **options, **extra)


def run(job: dict) -> dict:
    """Time (`job["time_steps"]`: each phase run at the short length once to warm up, then at both
    lengths, the difference of the process's CPU seconds per step kept, so start-up and first-call
    costs cancel out and a shared machine does not count) or train (`job["steps"]` per phase,
    checkpointed `save_min` steps apart or more, 20 times a phase)."""
    import torch

    torch.set_num_threads(1)
    from bertkit.pretrain import pretrain

    if job["random_positions"]:  # the scaled init's position table: N(0, std) like the rest
        import bertkit.pretrain.init as init

        init.sinusoids = lambda P, C: torch.randn(P, C) / math.sqrt(2)
    if job["residual_scale"] is not None:
        _scale_residuals(job["residual_scale"])
    root, previous = Path(job["out"]), None
    record = {"phases": [], "s_per_step": {}, "limits": {k: os.environ[k] for k in AVX2 if k in os.environ},
              "threads": torch.get_num_threads()}
    started = time.perf_counter()
    for i, phase in enumerate(job["phases"]):
        out = root / phase
        if job.get("time_steps"):
            cpu = []
            for n in (job["time_steps"][0], *job["time_steps"]):
                began = time.process_time()
                if pretrain(_config(job, out, n, phase, previous, overwrite=True)) != 0:
                    raise SystemExit(f"the {phase} phase was stopped")
                cpu.append(time.process_time() - began)
            short, long = job["time_steps"]
            record["s_per_step"][phase] = round((cpu[2] - cpu[1]) / (long - short), 5)
        elif not (out / DONE).is_file():  # a phase finished before a stop is not run again
            steps = job["steps"][i]
            cfg = _config(job, out, steps, phase, previous, save_every=max(job["save_min"], steps // 20), keep=0,
                          resume=True)
            if pretrain(cfg) != 0:
                raise SystemExit(f"the {phase} phase was stopped")
            (out / DONE).write_text(json.dumps({"steps": steps}))
        record["phases"].append({"objective": phase, "dir": str(out)})
        previous = out
    record["wall_s"] = round(time.perf_counter() - started, 1)
    (root / DONE).write_text(json.dumps(record))
    return record


def _scale_residuals(scale) -> None:
    """After the scaled init, each layer's attention and feed-forward output maps times `scale`
    ("depth": 1/sqrt(2 x layers), GPT-2's; 0: zero, each layer starts as LayerNorm(x))."""
    import torch

    import bertkit.pretrain.build as build
    import bertkit.pretrain.init as init
    from bertkit.model import Layer

    original = init.initialise

    def initialise(model, how):
        model = original(model, how)
        with torch.no_grad():
            layers = [m for m in model.modules() if isinstance(m, Layer)]
            factor = (2 * len(layers)) ** -0.5 if scale == "depth" else float(scale)
            for layer in layers:
                layer.attn_out.weight.mul_(factor)
                layer.ffn_out.weight.mul_(factor)
        return model

    init.initialise = build.initialise = initialise


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
