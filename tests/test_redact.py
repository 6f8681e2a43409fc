"""What of a ledger URL may be shown (its password masked) and stored (its password gone)."""

from __future__ import annotations

import pytest

from wedgewatch.base import redact


@pytest.mark.parametrize(
    ("given", "shown", "stored"),
    [
        ("postgresql://ww:pw@db:5432/ww", "postgresql://ww:***@db:5432/ww", "postgresql://ww@db:5432/ww"),
        ("postgresql://ww:p%40ss@db/ww", "postgresql://ww:***@db/ww", "postgresql://ww@db/ww"),
        ("postgresql://ww:@db/ww", "postgresql://ww:***@db/ww", "postgresql://ww@db/ww"),
        ("postgresql://ww@db/ww", "postgresql://ww@db/ww", "postgresql://ww@db/ww"),
        ("/tmp/a:b@c.sqlite", "/tmp/a:b@c.sqlite", "/tmp/a:b@c.sqlite"),
        ("postgresql://ww:pw@[::1/ww", "<unparsable URL>", "<unparsable URL>"),
    ],
)
def test_a_ledger_urls_password_is_masked_when_shown_and_dropped_when_stored(
    given: str, shown: str, stored: str
) -> None:
    assert redact.url(given) == shown
    assert redact.stored_url(given) == stored
