"""Drives spade's generated DAG files through a real Airflow (TestDagAirflowReal).

Usage: python drive.py DAGS_FOLDER SCHEDULED_DAG_ID MANUAL_DAG_ID RUNS OUT

Loads every file of DAGS_FOLDER with Airflow's own DagBag (the parser the
dag processor uses) and fails on any import error or deprecation warning of
an import path. Then, as the scheduler would, asks the scheduled DAG's
timetable for its next DAG run (catchup off) RUNS times, and runs each such
DAG run with DAG.test (Airflow's in-process runner, the one `airflow dags
test` uses) at the logical date the timetable gave. Writes one JSON line per
result to OUT (Airflow logs to stdout):
  {"dag": ID, "tasks": {task_id: [upstream task ids]}, "schedule": ..., "params": [...]}
  {"run": i, "logical_date": ..., "state": ..., "tasks": {task_id: state}}
"""

import json
import sys
import warnings


def main():
    folder, sched_id, manual_id, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    out = open(sys.argv[5], "w")

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    from airflow.dag_processing.dagbag import DagBag

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=folder)
    if bag.import_errors:
        raise SystemExit("import errors: %r" % (bag.import_errors,))
    deprecated = [str(w.message) for w in caught if "deprecated" in str(w.message).lower() and "airflow" in str(w.message)]
    if deprecated:
        raise SystemExit("deprecated Airflow imports: %r" % deprecated)
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    for dag_id in (sched_id, manual_id):
        dag = bag.dags[dag_id]
        emit({
            "dag": dag_id,
            "tasks": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks},
            "schedule": coerce_to_core_timetable(dag.timetable).summary,
            "catchup": dag.catchup,
            "max_active_runs": dag.max_active_runs,
            "params": sorted(dag.params.keys()),
        })

    dag = bag.dags[sched_id]
    timetable = coerce_to_core_timetable(dag.timetable)
    last = None
    for i in range(runs):
        restriction = TimeRestriction(earliest=dag.start_date, latest=None, catchup=dag.catchup)
        info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None:
            raise SystemExit("the timetable schedules no run")
        dr = dag.test(logical_date=info.logical_date)
        tis = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
        emit({"run": i, "logical_date": info.logical_date.isoformat(), "state": str(dr.state), "tasks": tis})
        last = info.data_interval


if __name__ == "__main__":
    main()
