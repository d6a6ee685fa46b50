"""SubprocessHook: runs a command, returns its exit code and last output line."""

import subprocess
import sys
import tempfile
from collections import namedtuple

SubprocessResult = namedtuple("SubprocessResult", ["exit_code", "output"])


class SubprocessHook:
    def __init__(self):
        self.sub_process = None

    def run_command(self, command, env=None, output_encoding="utf-8", cwd=None):
        with tempfile.TemporaryDirectory(prefix="airflowtmp") as tmp:
            self.sub_process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd or tmp, env=env
            )
            line = ""
            for raw in self.sub_process.stdout:
                line = raw.decode(output_encoding).rstrip()
                print(line, file=sys.stderr)  # the task log
            self.sub_process.wait()
            return SubprocessResult(exit_code=self.sub_process.returncode, output=line)

    def send_sigterm(self):
        if self.sub_process is not None:
            self.sub_process.terminate()
