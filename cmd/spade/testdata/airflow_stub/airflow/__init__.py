"""Stand-in for the parts of Airflow that spade's generated DAG uses (tests only)."""

_current = []


class DAG:
    """Collects the tasks created inside its with block."""

    def __init__(self, dag_id, default_args=None, params=None, **kwargs):
        self.dag_id = dag_id
        self.default_args = dict(default_args or {})
        self.params = params or {}
        self.tasks = []

    def __enter__(self):
        _current.append(self)
        return self

    def __exit__(self, *exc):
        _current.pop()
        return False


def current_dag():
    return _current[-1] if _current else None
