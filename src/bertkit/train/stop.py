"""Stopping a training run on request: SIGTERM or Ctrl-C finish the step, save, and exit 128 + N.

A scheduler stops a job with SIGTERM and a person with Ctrl-C (SIGINT). `StopRequest` turns
either into a flag the loop reads after each step (a second Ctrl-C aborts at once), so the loop
saves a checkpoint of the step it finished and raises `Stopped`; the CLI prints its line and exits
with the conventional 128 + the signal's number (143 for SIGTERM, 130 for SIGINT), which tells a
stopped run from a finished one (0). Fine-tuning, distillation and `bertkit tune` use it.
"""

from __future__ import annotations

import signal


class Stopped(Exception):
    """A run that a signal stopped after saving what continues it: the message says where and how."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopRequest:
    """While entered: SIGTERM and SIGINT set `signum` instead of stopping the process."""

    def __init__(self, how: str = "continue with --resume"):
        """`how`: how the stopped run is continued, for its last line."""
        self.signum: int | None = None
        self.how = how
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal's number; SIGTERM's for a stop another process asked for (under DDP)."""
        return 128 + (self.signum or signal.SIGTERM)

    def stopped(self, where: str) -> Stopped:
        """The exception to raise once `where` (what was saved) is known."""
        name = signal.Signals(self.signum).name
        return Stopped(f"stopped by {name}: {where}; {self.how} (exit status {self.exit_code})", self.signum)
