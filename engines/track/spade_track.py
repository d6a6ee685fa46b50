"""Logs one sealed spade round to experiment trackers (docs/operations.md).

Reads a JSON request on stdin:
  {"run": NAME, "round": R, "trackers": ["mlflow", "wandb", "tensorboard"],
   "experiment": "spade", "config_digest": HEX, "mlflow_tracking_uri": "",
   "wandb_mode": "offline", "wandb_dir": DIR, "tensorboard_dir": DIR,
   "metrics": {KEY: VALUE, ...}}
and writes {"mlflow": "logged" | "already logged", ...} as JSON on stdout.

Every tracker gets the round's metrics at step R, through its own client,
once: before logging, the helper reads back from the tracker whether step R
carries the marker metric "spade/round", and skips the round if it does. The
marker is written in the same request as the metrics (MLflow log_batch, one
W&B history row, one TensorBoard flush), so a round is either logged whole or
not at all, up to a crash in the middle of a file write.
"""

import glob
import hashlib
import json
import os
import struct
import sys
import time
import zlib

MARKER = "spade/round"


def run_id(req):
    """A stable tracker run id for the spade run: 16 hex digits."""
    return hashlib.sha256(("%s\x00%s" % (req["experiment"], req["run"])).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- MLflow


def log_mlflow(req):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=req.get("mlflow_tracking_uri") or None)
    exp = client.get_experiment_by_name(req["experiment"])
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(req["experiment"])
    found = client.search_runs([exp_id], filter_string="tags.`spade.run` = '%s'" % req["run"].replace("'", "\\'"), max_results=2)
    if found:
        rid = found[0].info.run_id
    else:
        rid = client.create_run(exp_id, run_name=req["run"], tags={"spade.run": req["run"], "spade.config_digest": req["config_digest"]}).info.run_id
    step = int(req["round"])
    if any(m.step == step for m in client.get_metric_history(rid, MARKER)):
        return "already logged"
    ts = int(time.time() * 1000)
    metrics = [Metric(k, float(v), ts, step) for k, v in sorted(req["metrics"].items())]
    metrics.append(Metric(MARKER, float(step), ts, step))
    # log_batch takes at most 1000 metrics a call; the marker goes last.
    for i in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[i : i + 1000])
    client.set_terminated(rid, status="FINISHED")
    return "logged"


# ---------------------------------------------------------------- W&B

# W&B's offline transaction log (.wandb) is a LevelDB-style log of
# wandb_internal_pb2.Record protobufs: a 7-byte header (":W&B", magic 0xBEE1,
# version 0), then 32 KiB blocks of chunks, each "<IHB" (crc32, length, type:
# 1 full, 2 first, 3 middle, 4 last) and its payload.
WANDB_BLOCK = 32768


def wandb_records(path):
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 7 or data[:4] != b":W&B":
        return
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        if kind == 0 and length == 0:
            pos += left  # zero padding to the block end
            continue
        if len(chunk) < length:
            return  # a write cut short
        pos += 7 + length
        if kind in (1, 2):
            buf = chunk
        else:
            buf += chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


def wandb_history(wandb_dir, rid):
    """The history rows of every local file of the W&B run rid, as dicts."""
    rows = []
    for path in sorted(glob.glob(os.path.join(wandb_dir, "wandb", "*-" + rid, "run-" + rid + ".wandb"))):
        for rec in wandb_records(path):
            if rec.WhichOneof("record_type") != "history":
                continue
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


def log_wandb(req):
    wandb_dir = os.path.abspath(req["wandb_dir"])
    os.makedirs(wandb_dir, exist_ok=True)
    rid = run_id(req)
    step = int(req["round"])
    if any(r.get(MARKER) == step for r in wandb_history(wandb_dir, rid)):
        return "already logged"
    import wandb

    run = wandb.init(
        project=req["experiment"],
        name=req["run"],
        id=rid,
        dir=wandb_dir,
        mode=req["wandb_mode"],
        resume="allow",
        config={"spade_run": req["run"], "config_digest": req["config_digest"]},
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_meta=True),
    )
    row = {k: float(v) for k, v in req["metrics"].items()}
    row[MARKER] = step
    run.log(row, step=step)
    run.finish()
    return "logged"


# ---------------------------------------------------------------- TensorBoard


def tensorboard_steps(logdir, tag):
    from tensorboard.backend.event_processing import event_accumulator

    if not os.path.isdir(logdir):
        return []
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0}, purge_orphaned_data=False)
    acc.Reload()
    if tag not in acc.Tags().get("scalars", []):
        return []
    return [e.step for e in acc.Scalars(tag)]


def log_tensorboard(req):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = os.path.join(os.path.abspath(req["tensorboard_dir"]), req["run"])
    step = int(req["round"])
    if step in tensorboard_steps(logdir, MARKER):
        return "already logged"
    os.makedirs(logdir, exist_ok=True)
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in sorted(req["metrics"].items())]
    values.append(summary_pb2.Summary.Value(tag=MARKER, simple_value=float(step)))
    writer = EventFileWriter(logdir, filename_suffix=".spade")
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values)))
    writer.flush()
    writer.close()
    return "logged"


LOGGERS = {"mlflow": log_mlflow, "wandb": log_wandb, "tensorboard": log_tensorboard}


def main():
    req = json.load(sys.stdin)
    # The clients print to stdout (MLflow's run links, W&B's banners, and
    # W&B's service process inherits fd 1): send all of it to stderr and
    # keep the real stdout for the reply.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = {}
    for name in req["trackers"]:
        if name not in LOGGERS:
            print("spade_track: unknown tracker %r (want one of %s)" % (name, ", ".join(LOGGERS)), file=sys.stderr)
            return 2
        out[name] = LOGGERS[name](req)
    json.dump(out, reply)
    reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
