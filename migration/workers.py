"""A group of worker threads running one worker function; the first failure is kept and re-raised."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from core.context import RunContext, StopRequested


class WorkerGroup:
    """`count` threads of `target(ctx, worker_no)`, with their own stop event."""

    def __init__(self, ctx: RunContext, target: Callable[[RunContext, int], None], count: int, name: str) -> None:
        self.ctx = dataclasses.replace(ctx, stop=threading.Event())
        self.target = target
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), name=f"{name}-{i}", daemon=True)
                        for i in range(count)]

    def _run(self, worker_no: int) -> None:
        try:
            self.target(self.ctx, worker_no)
        except StopRequested:   # asked to stop mid-step: a stop like any other
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the coordinator
            self.errors.append(exc)
            self.ctx.stop.set()

    def start(self) -> "WorkerGroup":
        for thread in self.threads:
            thread.start()
        return self

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` for the threads to finish."""
        for thread in self.threads:
            thread.join(timeout / max(len(self.threads), 1))

    def stop(self) -> None:
        self.ctx.stop.set()
        for thread in self.threads:
            thread.join()

    def raise_if_failed(self) -> None:
        if self.errors:
            raise self.errors[0]
