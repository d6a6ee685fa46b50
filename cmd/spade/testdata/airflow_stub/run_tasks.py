"""Runs every task of a DAG written by "spade dag airflow" under a stand-in
Airflow (the airflow package next to this file; Airflow is not installed
where the tests run) and prints one JSON object per task and exit code.

The stand-in mirrors what the DAG relies on: BashOperator.execute runs its
command through self.subprocess_hook.run_command (a functools.cached_property),
skips the task on exit 99 (AirflowSkipException) and raises a plain
AirflowException on any other non-zero exit code. Tasks are run the way
Airflow's task runner treats these exceptions: AirflowFailException fails a
task at once, whatever retries it has left; any other AirflowException is
retried until the task's retries are used up.

usage: run_tasks.py DAG_FILE ROUND SCENARIO...
SCENARIO is RUNS_AT:EXIT, the exit codes that the fake spade named in the
DAG gives "spade dag runs-at" and every other spade command; it reads them
from FAKE_RUNS_AT and FAKE_EXIT and appends its arguments to FAKE_LOG.
"""

import copy
import json
import os
import runpy
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from airflow.decorators import _PythonTask  # noqa: E402
from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException  # noqa: E402
from airflow.models.baseoperator import MappedOperator  # noqa: E402
from airflow.operators.bash import BashOperator  # noqa: E402


def run(op, context):
    """Runs op like Airflow's task runner: (final state, tries)."""
    tries = 0
    while True:
        tries += 1
        try:
            op.execute(context)
            return "success", tries
        except AirflowSkipException:
            return "skipped", tries
        except AirflowFailException:
            return "failed", tries
        except AirflowException:
            if tries > op.retries:
                return "failed", tries


def main():
    dag_file, rnd, scenarios = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    dag = runpy.run_path(dag_file)["dag"]
    params = {name: p.value for name, p in dag.params.items()}
    params["round"] = rnd
    context = {"params": params}
    log = os.path.join(tempfile.mkdtemp(), "calls")
    os.environ["FAKE_LOG"] = log
    for scenario in scenarios:
        runs_at, code = scenario.split(":")
        os.environ["FAKE_RUNS_AT"], os.environ["FAKE_EXIT"] = runs_at, code
        for task in dag.tasks:
            if isinstance(task, _PythonTask):
                continue
            if isinstance(task, MappedOperator):
                # The first shard: the first value of the task mapped over.
                values = {k: v.execute(context)[0] for k, v in task.mapped_kwargs.items()}
                op = task.unmap(**values)
            else:
                op = task
            assert isinstance(op, BashOperator), task.task_id
            op.bash_command = op.bash_command.replace("{{ params.round }}", str(rnd))
            assert "{{" not in op.bash_command, op.bash_command
            open(log, "w").close()
            state, tries = run(op, context)
            # Airflow copies operators (BaseOperator.__deepcopy__ copies every
            # attribute, the cached hook included): the wrapping hook must
            # survive being rebuilt without __init__, as copy does.
            assert copy.copy(op.subprocess_hook).hook is op.subprocess_hook.hook
            with open(log) as f:
                calls = f.read().splitlines()
            print(json.dumps({
                "task": task.task_id, "mapped": isinstance(task, MappedOperator),
                "retries": op.retries, "runs_at": int(runs_at), "exit": int(code),
                "state": state, "tries": tries, "calls": calls,
            }))


if __name__ == "__main__":
    main()
