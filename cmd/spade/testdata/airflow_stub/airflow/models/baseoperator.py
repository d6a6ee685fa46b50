"""A task of the stand-in DAG: registered with the DAG being defined."""

from airflow import current_dag


class BaseOperator:
    def __init__(self, task_id, retries=None, trigger_rule=None, **kwargs):
        if kwargs:
            raise TypeError("unexpected arguments %s" % sorted(kwargs))
        self.task_id = task_id
        self.dag = current_dag()
        defaults = self.dag.default_args if self.dag else {}
        self.retries = defaults.get("retries", 0) if retries is None else retries
        self.trigger_rule = trigger_rule or defaults.get("trigger_rule", "all_success")
        self.upstream = []
        if self.dag is not None:
            self.dag.tasks.append(self)

    def __rshift__(self, other):
        other.upstream.append(self)
        return other

    @classmethod
    def partial(cls, **kwargs):
        return _Partial(cls, kwargs)


class _Partial:
    def __init__(self, cls, kwargs):
        self.cls, self.kwargs = cls, kwargs

    def expand(self, **mapped):
        return MappedOperator(self.cls, self.kwargs, mapped)


class MappedOperator:
    """A mapped task: one instance of operator_class per mapped value."""

    def __init__(self, operator_class, partial_kwargs, mapped_kwargs):
        self.operator_class = operator_class
        self.partial_kwargs = partial_kwargs
        self.mapped_kwargs = mapped_kwargs
        self.task_id = partial_kwargs["task_id"]
        self.dag = current_dag()
        self.upstream = []
        self.dag.tasks.append(self)

    def __rshift__(self, other):
        other.upstream.append(self)
        return other

    def unmap(self, **values):
        """The task instance of one mapped value (not one of the DAG's tasks)."""
        import airflow

        airflow._current.append(self.dag)
        try:
            op = self.operator_class(**self.partial_kwargs, **values)
        finally:
            airflow._current.pop()
        self.dag.tasks.remove(op)
        return op
