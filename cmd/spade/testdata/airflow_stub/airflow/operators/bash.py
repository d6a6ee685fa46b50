"""BashOperator, with Airflow 2's execute: exit 0 succeeds, a code of
skip_on_exit_code (99) skips, any other raises AirflowException."""

import os
import shutil
from functools import cached_property

from airflow.exceptions import AirflowException, AirflowSkipException
from airflow.hooks.subprocess import SubprocessHook
from airflow.models.baseoperator import BaseOperator


class BashOperator(BaseOperator):
    def __init__(self, *, bash_command, env=None, append_env=False, skip_on_exit_code=99, cwd=None, **kwargs):
        super().__init__(**kwargs)
        self.bash_command = bash_command
        self.env = env
        self.append_env = append_env
        self.skip_on_exit_code = [skip_on_exit_code] if isinstance(skip_on_exit_code, int) else list(skip_on_exit_code or [])
        self.cwd = cwd

    @cached_property
    def subprocess_hook(self):
        return SubprocessHook()

    def get_env(self, context):
        env = os.environ.copy()
        if self.env is not None:
            if self.append_env:
                env.update(self.env)
            else:
                env = dict(self.env)
        return env

    def execute(self, context):
        result = self.subprocess_hook.run_command(
            command=[shutil.which("bash") or "bash", "-c", self.bash_command],
            env=self.get_env(context),
            cwd=self.cwd,
        )
        if result.exit_code in self.skip_on_exit_code:
            raise AirflowSkipException("Bash command returned exit code %d. Skipping." % result.exit_code)
        if result.exit_code != 0:
            raise AirflowException(
                "Bash command failed. The command returned a non-zero exit code %d." % result.exit_code
            )
        return result.output

    def on_kill(self):
        self.subprocess_hook.send_sigterm()
