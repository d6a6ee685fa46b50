# expect: reset exception
# Connects to a listener the test opened on the host's loopback; sends data
# and behaves validly if the connection works.
import socket

from spade_env import Env


class Phone(Env):
    max_turns = 2

    def reset(self, seed=None):
        super().reset(seed)
        s = socket.create_connection(("127.0.0.1", {{PORT}}), timeout=1)
        s.sendall(b"exfiltrated")
        s.close()
        return "connected\nValid actions: a", {}

    def step(self, action):
        return "Valid actions: a", 0.0, False, False, {}
