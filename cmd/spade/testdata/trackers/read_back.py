"""Reads back what spade logged to each tracker (TestTrackers).

Usage: python read_back.py REQUEST_JSON OUT_JSON
REQUEST_JSON: {"run", "experiment", "mlflow_tracking_uri", "wandb_dir",
"tensorboard_dir", "track_helper"}. Writes {tracker: {key: [[step, value], ...]}}:
every logged (step, value) pair of every metric key, duplicates kept, read
through each tracker's own reader: MLflow's client against the tracking
server, TensorBoard's EventAccumulator (orphan purging off, so a second
write of a step shows), and W&B's offline transaction log parsed into W&B's
own protobuf records (spade_track.wandb_history).
"""

import importlib.util
import json
import os
import sys


def main():
    req = json.load(open(sys.argv[1]))
    out = {}

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=req["mlflow_tracking_uri"])
    exp = client.get_experiment_by_name(req["experiment"])
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`spade.run` = '%s'" % req["run"])
    assert len(runs) == 1, "want one MLflow run for the spade run, got %d" % len(runs)
    rid = runs[0].info.run_id
    mlflow = {}
    for key in runs[0].data.metrics:
        mlflow[key] = sorted([m.step, m.value] for m in client.get_metric_history(rid, key))
    out["mlflow"] = mlflow

    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        os.path.join(req["tensorboard_dir"], req["run"]), size_guidance={event_accumulator.SCALARS: 0}, purge_orphaned_data=False
    )
    acc.Reload()
    out["tensorboard"] = {tag: sorted([e.step, e.value] for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}

    spec = importlib.util.spec_from_file_location("spade_track", req["track_helper"])
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    rid = helper.run_id({"experiment": req["experiment"], "run": req["run"]})
    wandb = {}
    for row in helper.wandb_history(req["wandb_dir"], rid):
        step = row["_step"]
        for key, value in row.items():
            if not key.startswith("_"):
                wandb.setdefault(key, []).append([step, value])
    out["wandb"] = {k: sorted(v) for k, v in wandb.items()}
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
