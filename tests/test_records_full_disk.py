"""The proxy's request rows on a ledger whose file system fills up for real (a loop-mounted ext4 of
its own, filled to its last block, as ``bench chaos`` does): no handler waits on the disk, and no
row is lost once the disk has room again. Before this, a failed batch was dropped (``bench chaos``
found starts without ends after a few seconds of a full disk)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from wedgewatch.bench.rig.strikes import LedgerDisk
from wedgewatch.ledger import Ledger
from wedgewatch.proxy.records import RecordSink
from wedgewatch.testing import eventually_async

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a loop mount needs root")


def _start(n: int) -> dict[str, object]:
    return {
        "request_id": f"r{n}",
        "path": "/v1/chat/completions",
        "client_stream": 1,
        "started_at": time.time(),
    }


def _end(n: int) -> dict[str, object]:
    return {**_start(n), "duration": 0.1, "outcome": "ok"}


def test_rows_written_while_the_disk_is_full_land_once_it_has_room(tmp_path: Path) -> None:
    disk = LedgerDisk(tmp_path / "fs", 16)
    try:
        ledger = Ledger(disk.path / "ledger.sqlite")

        async def go() -> None:
            sink = RecordSink(ledger)
            await sink.write(_start(0), "request_starts")
            await sink.write(_end(0))
            disk.fill()
            await asyncio.wait_for(sink.write(_start(1), "request_starts"), 30)  # tried, failed, released
            # While the disk fails, a handler is released at once: its row waits for the next try.
            for n in range(1, 4):
                if n > 1:
                    assert sink.submit(_start(n), "request_starts").done()
                assert sink.submit(_end(n)).done()
            assert ledger.query("SELECT COUNT(*) FROM requests")[0][0] == 1
            disk.free()
            await eventually_async(
                lambda: ledger.query("SELECT COUNT(*) FROM requests")[0][0] == 4, 30, what="the held rows"
            )
            await sink.close()

        asyncio.run(go())
        starts = {r[0] for r in ledger.query("SELECT request_id FROM request_starts")}
        ends = {r[0] for r in ledger.query("SELECT request_id FROM requests")}
        assert starts == ends == {"r0", "r1", "r2", "r3"}
        ledger.close()
    finally:
        disk.remove()


def test_a_sink_closed_while_the_disk_is_still_full_returns(tmp_path: Path) -> None:
    disk = LedgerDisk(tmp_path / "fs", 16)
    try:
        ledger = Ledger(disk.path / "ledger.sqlite")

        async def go() -> None:
            sink = RecordSink(ledger)
            await sink.write(_start(0), "request_starts")
            disk.fill()
            await sink.write(_end(0))
            await asyncio.wait_for(sink.close(), 30)  # one more try, then the rows are given up

        asyncio.run(go())
        assert ledger.query("SELECT COUNT(*) FROM requests")[0][0] == 0
        ledger.close()
    finally:
        disk.remove()
