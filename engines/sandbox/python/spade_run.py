"""Launcher: imports the harness as a module so its precompiled bytecode
(__pycache__, written once per Sandbox by the Go side) is used; a script run
as __main__ would be compiled on every start."""

import spade_harness

spade_harness.main()
