"""Airflow's task exceptions, as the task runner tells them apart."""


class AirflowException(Exception):
    """A task failure: retried while the task has retries left."""


class AirflowSkipException(AirflowException):
    """The task is marked skipped."""


class AirflowFailException(AirflowException):
    """The task fails at once, whatever retries it has left."""
