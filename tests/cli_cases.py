"""The rows of tests/test_cli_contract.py: one user mistake per `Case`, for every command, in two
files by what the command does (`cli_cases_training.py`, `cli_cases_using.py`); `Case` and the
inputs they share are `cli_case.py`'s.
"""

from __future__ import annotations

from cli_case import Case
from cli_cases_training import TRAINING
from cli_cases_using import USING

CASES = [*TRAINING, *USING]
__all__ = ["CASES", "Case"]
