"""`bertkit embed --engine ray`: the same shards from a Ray Data pipeline, on one machine or a cluster.

    read: one task per corpus file, on the driver's machine -> a row per shard {shard, ids, texts}
    embed: `map_batches` on a pool of `workers` actors, `threads` CPUs each, one shard per call;
           each actor loads the model once and runs `Embedder.embed`, as the in-process engine does
    write: the driver writes each shard as its row arrives (`run.embed_corpus`), in any order

Only the driver's machine reads the corpus and writes the shards; texts and vectors travel in Ray's
object store, so another machine needs bertkit with Ray in the same Python environment and the
model folder at the same path, nothing else. Blocks are one shard each, so a shard's vectors reach
the driver (and its file the disk) as soon as its actor finishes it. Ray Data restarts an actor
that dies and gives its shard to the pool again (`RESTARTS`, set here rather than left to Ray
Data's defaults), so the run ends with every shard; if the driver dies, a rerun keeps every shard it
wrote. Without `address`, a local Ray is started for the run (all of this machine's cores) and
stopped after it; an already connected Ray (a test's) is used as it is.
"""

from __future__ import annotations

import json
import logging

import numpy as np

from bertkit.corpus.embedder import EmbedSettings
from bertkit.corpus.sources import ShardSpec, Source, shard_passages
from bertkit.errors import UserError

INSTALL = "--engine ray needs Ray: pip install 'bertkit[ray]'"
# A model actor that dies (a killed process, a lost machine) is started again and its shard's call
# retried, without limit: the run ends with every shard, as Ray Data does by default.
RESTARTS = {"max_restarts": -1, "max_task_retries": -1}


def _connect(address: str | None) -> bool:
    """Join the cluster at `address`, or start a local Ray; True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(include_dashboard=False, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as e:
        where = f"--ray-address {address}" if address else "a local Ray"
        raise UserError(f"{where}: cannot start or join Ray ({str(e).splitlines()[0]})") from None
    return True


def _workers(asked: int | None, threads: int) -> int:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0))
    workers = asked or max(1, cpus // threads)
    if workers * threads > cpus:
        raise UserError(f"--workers {workers} x --threads {threads} needs {workers * threads} CPUs; "
                        f"the Ray cluster has {cpus}")
    return workers


def _reader(sources: list[Source], several: bool):
    """The read stage: a file's row {"source", "shards"} -> one row per shard of it still to embed."""

    def read(row: dict):
        specs = [ShardSpec.from_dict(s) for s in json.loads(row["shards"])]
        for spec, ids, texts in shard_passages(sources[int(row["source"])], specs, several):
            yield {"shard": spec.index, "ids": json.dumps(ids, ensure_ascii=False),
                   "texts": json.dumps(texts, ensure_ascii=False)}

    return read


def _actor(settings: EmbedSettings, batch_size: int, threads: int):
    """The actor class of the embed stage; the settings travel inside it (no constructor arguments)."""

    class ShardEmbedder:
        def __init__(self):
            import torch

            from bertkit.corpus.embedder import Embedder

            torch.set_num_threads(threads)
            self.embedder = Embedder(settings, batch_size, "cpu")

        def __call__(self, batch: dict) -> dict:
            out: dict[str, list] = {"shard": [], "ids": [], "vectors": [], "dim": [], "report": []}
            for shard, ids, texts in zip(batch["shard"], batch["ids"], batch["texts"]):
                vectors, report = self.embedder.embed(json.loads(texts))
                out["shard"].append(int(shard))
                out["ids"].append(ids)
                out["vectors"].append(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
                out["dim"].append(vectors.shape[1])
                out["report"].append(json.dumps(report))
            return {k: np.asarray(v, dtype=object if k in ("ids", "vectors", "report") else np.int64)
                    for k, v in out.items()}

    return ShardEmbedder


def _user_error(e: BaseException) -> UserError | None:
    """A UserError raised inside a Ray task, however Ray wrapped it."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError):
            return e
        cause = getattr(e, "cause", None)
        e = cause if isinstance(cause, BaseException) else e.__cause__
    return None


def _on_this_machine() -> dict:
    """The read stage's placement: the driver's machine (a node label from Ray 2.4x, before that a
    scheduling strategy, which newer Ray warns about)."""
    import inspect

    import ray
    from ray.data import Dataset

    node = ray.get_runtime_context().get_node_id()
    if "label_selector" in inspect.signature(Dataset.flat_map).parameters:
        return {"label_selector": {"ray.io/node-id": node}}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


def run_ray(sources: list[Source], todo: list[ShardSpec], settings: EmbedSettings, engine, done) -> None:
    """Embed the shards `todo` on Ray; `done(spec, ids, vectors, report)` as each arrives."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    started = _connect(engine.address)
    context = DataContext.get_current()
    before = context.target_max_block_size, context.enable_progress_bars
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    try:
        workers = _workers(engine.workers, engine.threads)
        context.target_max_block_size, context.enable_progress_bars = 1, False  # a block per shard; our own bar
        files = sorted({s.source for s in todo})
        items = [{"source": i, "shards": json.dumps([s.as_dict() for s in todo if s.source == i])} for i in files]
        rows = (ray.data.from_items(items)
                .flat_map(_reader(sources, len(sources) > 1), num_cpus=0, **_on_this_machine())
                .map_batches(_actor(settings, engine.batch_size, engine.threads), batch_size=1,
                             compute=ActorPoolStrategy(size=workers), num_cpus=engine.threads, **RESTARTS))
        specs = {s.index: s for s in todo}
        for row in rows.iter_rows():
            spec = specs[int(row["shard"])]
            vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(spec.count, int(row["dim"]))
            done(spec, json.loads(row["ids"]), vectors, json.loads(row["report"]))
    except Exception as e:
        error = _user_error(e)
        if error is None:
            raise
        raise UserError(str(error)) from None
    finally:
        context.target_max_block_size, context.enable_progress_bars = before
        if started:
            ray.shutdown()
