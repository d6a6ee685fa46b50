"""@task: a Python task whose call creates the task in the DAG."""

from airflow.models.baseoperator import BaseOperator


class _PythonTask(BaseOperator):
    def __init__(self, task_id, fn):
        super().__init__(task_id=task_id)
        self.fn = fn

    def execute(self, context):
        return self.fn(**context)


def task(task_id):
    def decorate(fn):
        def create():
            return _PythonTask(task_id, fn)

        return create

    return decorate
