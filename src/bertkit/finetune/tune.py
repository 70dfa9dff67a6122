"""`bertkit tune`: hyper-parameter search for fine-tuning, with Optuna.

The data is read and encoded once (`finetune.run.prepare_job`); each trial draws lr, epochs, batch
size, warm-up and weight decay from the search space (`finetune.search_space`, TPE, seeded) and
trains one seed in this process with the fine-tuning loop itself (`finetune.loop.train_seed`,
started by `seed_model` exactly as `bertkit finetune` starts a seed), keeping its best evaluation
by the chosen metric. A trial's score is that best checkpoint's dev metric, never its last
epoch's (transformers' `hyperparameter_search` scores the last; its issues #25247 and #16683).
Every evaluation is reported to the trial at its epoch in hundredths, so trials of different
batch sizes are compared at the same point of training, and Optuna's median rule stops a trial
whose dev metric is below the median of the finished trials' at that point (pruned).

The study lives in OUT/study.db (SQLite) under one name, so rerunning the command continues it
up to --trials finished trials (complete or pruned). One process works on a study at a time (a
lock in OUT says so). The running trial is checkpointed like a fine-tuning seed (at each
evaluation and every --save-every steps, in OUT/checkpoints/trial-N, deleted when it ends), so a
trial left running by a killed or stopped (SIGTERM, Ctrl-C) process is continued by the next run
from its checkpoint, with its own parameters; each trial's parameters are drawn by a sampler
seeded with --seeds plus the trial's number, so a study continued after a kill holds the trials
and values the uninterrupted one would. After each trial OUT/trials.json, OUT/best.json (with the
`bertkit finetune` command that trains the best trial's model again) and OUT/trials.png are
rewritten, each atomically.
"""

from __future__ import annotations

import fcntl
import json
import math
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bertkit.errors import UserError
from bertkit.finetune.best import lower_is_better
from bertkit.finetune.loop import seed_model, train_seed
from bertkit.finetune.resume import SeedCheckpoints, checkpoint_bytes
from bertkit.finetune.run import FinetuneJob, JobData, check_start, input_notes, prepare_job
from bertkit.finetune.search_space import Space, flag_name
from bertkit.io import check_free_space, size_text, write_json
from bertkit.train.stop import Stopped, StopRequest

STUDY_NAME = "bertkit-tune"
STUDY_FILE = "study.db"
OUTPUTS = (STUDY_FILE, "trials.json", "best.json", "trials.png")
LOCK_FILE = ".tune.lock"
CHECKPOINTS = "checkpoints"  # the running trial's, OUT/checkpoints/trial-N
RANDOM_TRIALS = 5  # TPE draws at random until this many trials have finished


@dataclass
class TuneJob:
    job: FinetuneJob  # the data, model and task; a trial replaces its hyper's searched fields and seeds
    space: Space
    trials: int  # finished trials (complete or pruned) the study should hold
    timeout: float | None = None  # no new trial starts after this many seconds
    metric: str | None = None  # the dev metric a trial is scored by (its best evaluation's); None: the task's main
    seed: int = 1  # every trial's training seed; the sampler's is this plus the trials already in the study
    prune_startup: int = 3  # no trial is pruned before this many have completed
    prune_warmup: float = 0.0  # nor before this epoch
    overwrite: bool = False  # start a new study instead of continuing OUT's
    settings: dict = field(default_factory=dict)  # what a continued study must have been made with
    finetune_args: dict | None = None  # `bertkit finetune`'s flags (a namespace dict), for the best command


def _optuna():
    try:
        import optuna
    except ImportError:
        raise UserError("bertkit tune needs Optuna: pip install 'bertkit[tune]' (or pip install optuna)") from None
    # Our own status line per trial; no "trial failed" warning with a traceback for a Ctrl-C.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


def run_study(tj: TuneJob, log=print) -> dict:
    """Run (or continue) the study in tj.job.out until it holds tj.trials finished trials; the
    content of best.json ({} before any trial completes)."""
    optuna = _optuna()
    out = Path(tj.job.out)
    if (out / STUDY_FILE).exists() and not tj.overwrite:
        _check_settings(_load(optuna, out), tj, out)  # before the data is read: a mistake costs nothing
    data = prepare_job(tj.job, command="tune")
    metric = tj.metric or data.task.main_metric
    model, start = check_start(data, metric)  # the reference a trial should beat
    if tj.job.hyper.checkpoints:  # the running trial's, two at once while the next is written
        checkpoint = checkpoint_bytes(model, True)[1]
        check_free_space(out, 2 * checkpoint, f"the running trial's checkpoints (2 of {size_text(checkpoint)})")
    del model
    log(data.summary)
    log(f"  encoded in {data.encode_s:.1f}s: {len(data.train.features)} training features")
    input_notes(data, log)
    log(f"  {tj.space.describe()}; each trial scored by its best dev {metric} (seed {tj.seed})")
    log(f"  the starting model (an untrained head): dev {metric} {start:.4g}")
    out.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        if tj.overwrite:
            for name in OUTPUTS:
                (out / name).unlink(missing_ok=True)
            shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
        study = _open_study(optuna, out, tj, metric)
        done = len(_finished(study))
        if done >= tj.trials:
            log(f"the study holds {done} finished trials already (--trials {tj.trials}); raise --trials for more")
        report = _Report(tj, out, metric, data, log)
        try:
            with warnings.catch_warnings(), StopRequest("run the same command again to continue") as stop:
                warnings.simplefilter("ignore")  # Optuna's experimental and duplicate-report notes
                _optimize(optuna, study, _Trial(optuna, tj, data, metric, out, stop), tj, report.after_trial, log)
        finally:
            best = report.write(study)
    return best


def _optimize(optuna, study, trial_runner, tj: TuneJob, after_trial: Callable, log) -> None:
    """Continue the trials a stopped run left running, then ask for new ones until the study holds
    tj.trials finished ones (or tj.timeout has passed): each trial's parameters drawn by a sampler
    seeded from the trial's number, so they do not depend on where earlier runs stopped."""
    from optuna.trial import TrialState

    start = time.time()
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        saved = SeedCheckpoints(trial_runner.out / CHECKPOINTS / f"trial-{frozen.number}", tj.seed, None).newest_step()
        log(f"continuing trial {frozen.number}, which a stopped run left "
            + (f"at its checkpoint of step {saved}" if saved is not None else "before its first checkpoint"))
        _seed_sampler(optuna, study, tj, frozen.number)
        after_trial(study, trial_runner(study, optuna.trial.Trial(study, frozen._trial_id)))
    while len(_finished(study)) < tj.trials and (tj.timeout is None or time.time() - start < tj.timeout):
        _seed_sampler(optuna, study, tj, len(study.trials))
        after_trial(study, trial_runner(study, study.ask()))


def _add_time(trial, start: float) -> None:
    """The trial's seconds, over every run that worked on it."""
    trial.set_user_attr("time_s", round(trial.user_attrs.get("time_s", 0) + time.time() - start, 1))


def _seed_sampler(optuna, study, tj: TuneJob, number: int) -> None:
    study.sampler = optuna.samplers.TPESampler(seed=tj.seed + number, n_startup_trials=RANDOM_TRIALS)


class _lock:
    """OUT/.tune.lock held for the run: a second `bertkit tune` on the same study is refused."""

    def __init__(self, out: Path):
        self.path = out / LOCK_FILE

    def __enter__(self):
        self.file = open(self.path, "a")  # held open for the whole run
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise UserError("another bertkit tune is working on this study; wait for it or choose another --out",
                            self.path.parent) from None
        return self

    def __exit__(self, *exc):
        self.file.close()  # closing releases the lock


def _open_study(optuna, out: Path, tj: TuneJob, metric: str):
    """The study in OUT/study.db, new or continued."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{(out / STUDY_FILE).resolve()}")
    pruner = optuna.pruners.MedianPruner(n_startup_trials=tj.prune_startup, n_warmup_steps=_at(tj.prune_warmup))
    direction = "minimize" if lower_is_better(metric) else "maximize"
    study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction=direction, pruner=pruner,
                                load_if_exists=True)
    if "settings" not in study.user_attrs:
        study.set_user_attr("settings", _settings(tj))
    return study


def _settings(tj: TuneJob) -> dict:
    """What a continued study must have been made with, as JSON holds it."""
    return json.loads(json.dumps({**tj.settings, "metric": tj.metric, "seed": tj.seed}))


def _load(optuna, out: Path):
    """The study in OUT/study.db, which must be one `bertkit tune` made."""
    import sqlalchemy.exc

    try:
        return optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{(out / STUDY_FILE).resolve()}")
    except KeyError:
        raise UserError(f"holds no study named {STUDY_NAME!r}; choose another --out", out / STUDY_FILE) from None
    except sqlalchemy.exc.DatabaseError as e:
        raise UserError(f"not an Optuna study database ({e.orig or e})", out / STUDY_FILE) from None


def _check_settings(study, tj: TuneJob, out: Path) -> None:
    made_with, settings = study.user_attrs.get("settings"), _settings(tj)
    if made_with is not None and made_with != settings:
        changed = sorted(k for k in made_with.keys() | settings.keys() if made_with.get(k) != settings.get(k))
        raise UserError(f"holds a study made with other settings ({', '.join(changed)}); rerun with the same "
                        f"flags, pass --overwrite to start a new study, or choose another --out", out / STUDY_FILE)


def _at(epoch: float) -> int:
    """An evaluation's position as reported to Optuna: its epoch in hundredths."""
    return round(epoch * 100)


def _finished(study) -> list:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))


class _Trial:
    """One trial, from its start or from the checkpoint a stopped run left: train it, prune it
    through its evaluations, tell the study its end (a stop leaves it running); its FrozenTrial."""

    def __init__(self, optuna, tj: TuneJob, data: JobData, metric: str, out: Path, stop: StopRequest):
        self.optuna, self.tj, self.data, self.metric, self.out, self.stop = optuna, tj, data, metric, out, stop

    def __call__(self, study, trial):
        from optuna.trial import TrialState

        tj, data = self.tj, self.data
        hp = replace(tj.job.hyper, **tj.space.suggest(trial), seeds=(tj.seed,), metric_for_best=self.metric)
        saver = SeedCheckpoints(self.out / CHECKPOINTS / f"trial-{trial.number}", tj.seed, hp.save_every)
        start = time.time()
        try:
            model = seed_model(data.task, data.model_dir, tj.seed)
            run, _ = train_seed(data.task, model, data.train, data.dev, hp, data.rt, tj.seed, log=lambda line: None,
                                on_eval=self._pruning(trial, hp), saver=saver, stop=self.stop)
            trial.set_user_attr("best_step", run.best_step)
            trial.set_user_attr("steps", run.steps)
            state, value = TrialState.COMPLETE, run.best_metric
        except self.optuna.TrialPruned:
            state, value = TrialState.PRUNED, None
        except Stopped:  # left running, with its checkpoint: the next run continues it
            _add_time(trial, start)
            raise
        except Exception:
            _add_time(trial, start)
            study.tell(trial, state=TrialState.FAIL)
            raise
        _add_time(trial, start)
        frozen = study.tell(trial, value, state=state)
        shutil.rmtree(saver.root, ignore_errors=True)
        if saver.root.parent.is_dir() and not any(saver.root.parent.iterdir()):
            saver.root.parent.rmdir()
        return frozen

    def _pruning(self, trial, hp) -> Callable[[dict], None]:
        metric, optuna = self.metric, self.optuna

        def report(record: dict) -> None:
            trial.report(record[metric], _at(record["epoch"]))
            # The last evaluation is not pruned: stopping there saves nothing, and the trial that ran
            # to the end is scored by its best checkpoint like any other.
            if record["epoch"] < hp.epochs and trial.should_prune():
                trial.set_user_attr("pruned_at", record["epoch"])
                raise optuna.TrialPruned()

        return report


class _Report:
    """After each trial: its status line, then trials.json, best.json and trials.png rewritten."""

    def __init__(self, tj: TuneJob, out: Path, metric: str, data: JobData, log):
        self.tj, self.out, self.metric, self.log = tj, out, metric, log
        self.main = data.task.main_metric

    def after_trial(self, study, trial) -> None:
        from optuna.trial import TrialState

        k = len(_finished(study))
        params = "  ".join(f"{flag_name(n)} {_fmt(v)}" for n, v in trial.params.items())
        took = f"{trial.user_attrs.get('time_s', 0):.0f}s"
        if trial.state == TrialState.COMPLETE:
            what = f"{self.metric} {trial.value:.4g} at step {trial.user_attrs.get('best_step')} ({took})"
        elif trial.state == TrialState.PRUNED:
            last = trial.intermediate_values[max(trial.intermediate_values)] if trial.intermediate_values else math.nan
            what = f"pruned at epoch {trial.user_attrs.get('pruned_at', 0):.2f}, {self.metric} {last:.4g} ({took})"
        else:
            what = f"{trial.state.name.lower()} ({took})"
        best = _best(study)
        so_far = f"best {best.value:.4g} (trial {best.number})" if best is not None else "no trial complete yet"
        self.log(f"trial {k}/{self.tj.trials} [{trial.number}]  {params}  -> {what};  {so_far}")
        self.write(study)

    def write(self, study) -> dict:
        from bertkit.plots import plot_trials

        trials = [_trial_record(t) for t in study.get_trials(deepcopy=False)]
        write_json(self.out / "trials.json", {"study": STUDY_NAME, "metric": self.metric,
                                              "direction": study.direction.name.lower(),
                                              "settings": study.user_attrs.get("settings"), "trials": trials})
        if trials:
            plot_trials(trials, self.metric, self.out / "trials.png")
        best = _best(study)
        if best is None:
            return {}
        content = {"trial": best.number, "metric": self.metric, "value": best.value,
                   "best_step": best.user_attrs.get("best_step"), "seed": self.tj.seed, "params": best.params,
                   "command": self.command(best.params)}
        write_json(self.out / "best.json", content)
        return content

    def command(self, params: dict) -> str | None:
        """The `bertkit finetune` command line that trains the best trial's model again: every flag as
        this run had it, the trial's values, its seed, and --metric-for-best so the saved model is
        its best checkpoint; the model goes to OUT/best."""
        if self.tj.finetune_args is None:
            return None
        from bertkit.model_card import command_line

        args = {**self.tj.finetune_args, **self.tj.space.fixed, **params, "seeds": (self.tj.seed,),
                "metric_for_best": self.metric, "out": str(self.out / "best"), "overwrite": False}
        return command_line("finetune", args)


def _best(study):
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    return study.best_trial


def _trial_record(t) -> dict:
    """A trial as trials.json holds it: state, values, the dev metric at each evaluation (by epoch)."""
    return {"number": t.number, "state": t.state.name.lower(), "value": t.value, "params": t.params,
            "best_step": t.user_attrs.get("best_step"), "steps": t.user_attrs.get("steps"),
            "pruned_at_epoch": t.user_attrs.get("pruned_at"), "time_s": t.user_attrs.get("time_s"),
            "evaluations": {f"{at / 100:g}": v for at, v in sorted(t.intermediate_values.items())}}


def _fmt(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
