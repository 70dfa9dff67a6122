"""Claims: how several processes running the same experiment (or `bertkit ablate`) on one folder split its cells.

A process claims a cell by creating `claims/<cell>` of the work folder exclusively (holding its pid) before
running it, and removes the file when the cell ends. A claim whose process has died is stale and
is taken over, so a killed process's cell runs again.
"""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.io import alive


class Claims:
    """The claim files of one work folder."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def file(self, cell_id: str) -> Path:
        return self.folder / cell_id.replace("/", "__")

    def claim(self, cell_id: str) -> bool:
        """Hold `cell_id` for this process; False while another live process holds it."""
        path = self.file(cell_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _holder_alive(path):
                    return False
                path.unlink(missing_ok=True)  # stale: its process died
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def held_by_others(self, cell_id: str) -> bool:
        path = self.file(cell_id)
        return path.is_file() and _holder(path) != os.getpid() and _holder_alive(path)

    def release(self, cell_id: str) -> None:
        path = self.file(cell_id)
        if path.is_file() and _holder(path) == os.getpid():
            path.unlink(missing_ok=True)


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _holder_alive(path: Path) -> bool:
    pid = _holder(path)
    if pid is None:  # being written this instant, or unreadable: treat as held
        return path.exists()
    return pid == os.getpid() or alive(pid)
