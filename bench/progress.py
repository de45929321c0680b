"""Progress on the terminal (rich, on stderr) for the long phases; quiet otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


@dataclass
class Step:
    """One progress bar (a no-op when stderr is not a terminal)."""

    progress: Progress | None
    task: TaskID | None

    def advance(self, n: int = 1) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, n)

    def update(self, completed: int) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=completed)


class Reporter:
    """Phase headings and progress bars on stderr; stdout keeps only the table."""

    def __init__(self) -> None:
        self.console = Console(stderr=True, highlight=False)
        self._progress: Progress | None = None

    @property
    def live(self) -> bool:
        return self.console.is_terminal

    def say(self, text: str) -> None:
        self.console.print(text)

    @contextmanager
    def bars(self) -> Iterator[None]:
        if not self.live:
            yield
            return
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        ) as progress:
            self._progress = progress
            try:
                yield
            finally:
                self._progress = None

    def step(self, description: str, total: int) -> Step:
        if self._progress is None:
            return Step(None, None)
        return Step(self._progress, self._progress.add_task(description, total=total))
