"""When the writer's manifest poller runs next (docs/gc-and-boundaries.md, "What a durable put
costs").

The poller (SlateDB RFC 0001, "Readers": "periodically refresh its state") picks up manifests
other processes commit (a compactor's runs, checkpoints) and moves the writer checkpoint to pin
them (SlateDB RFC 0004). None of that is needed for correctness: the writer's own commits and WAL
creates detect a newer writer (``Fenced``) or a destroyed database themselves, and what it reads
stays pinned by its checkpoint. So while polls find nothing new (the manifest the writer holds is
the one it held at the last poll: no commit of its own or of anyone else's came in between) the
wait doubles, from ``manifest_poll_interval`` up to ``manifest_poll_idle_interval``; a newer
manifest brings it back to ``manifest_poll_interval`` at once. The writer's own puts are no reason
to poll: they neither need nor change what the poll picks up (measured: 18 of 271 requests per
1,000 durable puts were polls at the base interval, bench/results/s3_requests.txt).
"""

from __future__ import annotations

from datetime import timedelta

IDLE_FACTOR = 16
"""``manifest_poll_idle_interval`` when it is None: this many times ``manifest_poll_interval``."""


class PollSchedule:
    """The poller's next wait, from what happened since its last poll."""

    def __init__(self, interval: timedelta, idle_interval: timedelta | None) -> None:
        self.base_s = interval.total_seconds()
        self.max_s = (
            self.base_s * IDLE_FACTOR if idle_interval is None else idle_interval.total_seconds()
        )
        self.wait_s = self.base_s
        self._last: int | None = None

    def next_wait(self, manifest_id: int) -> float:
        """The wait before the next poll, given the id of the manifest the writer holds, read
        after the poll that just ran."""
        if manifest_id == self._last:
            self.wait_s = min(self.max_s, self.wait_s * 2)
        else:
            self.wait_s = self.base_s
        self._last = manifest_id
        return self.wait_s
