"""wedgewatch/datekit: calendar arithmetic and durations."""

from __future__ import annotations

from wedgewatch.suites.authoring.spec import InstanceSpec, RepoSpec

CAL = '''"""Calendar arithmetic."""

from datetime import date

DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    """Gregorian rule: every 4th year, except centuries, except every 400th year."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    """Days in ``month`` (1-12) of ``year``."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return DAYS[month - 1]


def add_months(day, months):
    """The same day ``months`` later, clamped to the end of a shorter month (Jan 31 + 1: Feb 28)."""
    index = day.month - 1 + months
    year = day.year + index // 12
    month = index % 12 + 1
    return date(year, month, min(day.day, days_in_month(year, month)))
'''

DURATION = '''"""Durations as text."""

import re

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """"1h30m" -> 5400 seconds. Units d, h, m and s; a bare number is seconds."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    parts = re.findall(r"(\\d+)([dhms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"bad duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds):
    """5400 -> "1:30:00"; under an hour "M:SS" (75 -> "1:15")."""
    if seconds < 0:
        raise ValueError("negative duration")
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"
'''

TEST_CAL = """from datetime import date

import pytest

from datekit.cal import add_months, days_in_month, is_leap_year


def test_leap_years():
    assert is_leap_year(2024)
    assert not is_leap_year(2023)


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29


def test_days_in_month_rejects_13():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_add_months_simple():
    assert add_months(date(2023, 3, 15), 2) == date(2023, 5, 15)
    assert add_months(date(2023, 11, 15), 3) == date(2024, 2, 15)
"""

TEST_DURATION = """import pytest

from datekit.duration import format_duration, parse_duration


def test_parse_hours_minutes():
    assert parse_duration("1h30m") == 5400


def test_parse_bare_number():
    assert parse_duration("45") == 45


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_format_under_an_hour():
    assert format_duration(75) == "1:15"


def test_format_rejects_negative():
    with pytest.raises(ValueError):
        format_duration(-1)
"""

REPO = RepoSpec(
    repo="wedgewatch/datekit",
    files={
        "README.md": "# datekit\n\nCalendar arithmetic and durations.\n",
        "datekit/__init__.py": '"""Dates and durations."""\n',
        "datekit/cal.py": CAL,
        "datekit/duration.py": DURATION,
        "tests/test_cal.py": TEST_CAL,
        "tests/test_duration.py": TEST_DURATION,
    },
    instances=[
        InstanceSpec(
            number=1,
            created_at="2024-05-13T08:00:00Z",
            problem_statement=(
                "is_leap_year(1900) is True\n\n"
                "1900 and 2100 are not leap years (centuries are not, unless divisible by 400), "
                "but `datekit.cal.is_leap_year` says they are. 2000 was a leap year and must stay "
                "one.\n"
            ),
            bug=[
                (
                    "datekit/cal.py",
                    "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
                    "    return year % 4 == 0\n",
                )
            ],
            decoy=[
                (
                    "datekit/cal.py",
                    "    return year % 4 == 0\n",
                    "    return year % 4 == 0 and year % 100 != 0\n",
                )
            ],
            tests=[
                (
                    "tests/test_cal.py",
                    "\n\ndef test_leap_centuries():\n"
                    "    assert not is_leap_year(1900)\n"
                    "    assert not is_leap_year(2100)\n"
                    "    assert is_leap_year(2000)\n"
                    "    assert days_in_month(1900, 2) == 28\n",
                )
            ],
        ),
        InstanceSpec(
            number=2,
            created_at="2024-05-27T17:35:00Z",
            problem_statement=(
                "days_in_month() rejects December\n\n"
                "`days_in_month(2023, 12)` raises `ValueError: month must be in 1..12, got 12`. "
                "December has 31 days. Months outside 1..12 (0, 13) must still be rejected.\n"
            ),
            bug=[
                (
                    "datekit/cal.py",
                    "    if not 1 <= month <= 12:\n",
                    "    if not 1 <= month < 12:\n",
                )
            ],
            decoy=[
                (
                    "datekit/cal.py",
                    "    if not 1 <= month < 12:\n",
                    "    if not 0 <= month <= 12:\n",
                )
            ],
            tests=[
                (
                    "tests/test_cal.py",
                    "\n\ndef test_days_in_december():\n"
                    "    assert days_in_month(2023, 12) == 31\n"
                    "    assert add_months(date(2023, 11, 30), 1) == date(2023, 12, 30)\n"
                    "    with pytest.raises(ValueError):\n"
                    "        days_in_month(2023, 0)\n",
                )
            ],
        ),
        InstanceSpec(
            number=3,
            created_at="2024-06-10T10:10:00Z",
            problem_statement=(
                "parse_duration() does not understand seconds\n\n"
                '`parse_duration("90s")` and `parse_duration("1m30s")` raise '
                "`ValueError: bad duration`. The docstring lists the units d, h, m and s; "
                '"2h5s" should be 7205.\n'
            ),
            bug=[("datekit/duration.py", r"([dhms])", r"([dhm])")],
            decoy=[
                (
                    "datekit/duration.py",
                    "    text = text.strip().lower()\n",
                    '    text = text.strip().lower().rstrip("s")\n',
                )
            ],
            tests=[
                (
                    "tests/test_duration.py",
                    "\n\ndef test_parse_seconds():\n"
                    '    assert parse_duration("90s") == 90\n'
                    '    assert parse_duration("1m30s") == 90\n'
                    '    assert parse_duration("2h5s") == 7205\n',
                )
            ],
            hints_text="Look at the regular expression in parse_duration.",
        ),
        InstanceSpec(
            number=4,
            created_at="2024-06-24T14:45:00Z",
            problem_statement=(
                "format_duration() does not zero-pad minutes\n\n"
                '`format_duration(3903)` returns `"1:5:03"`. It should be `"1:05:03"`, as a clock '
                'shows it. Under an hour the format stays "M:SS".\n'
            ),
            bug=[
                (
                    "datekit/duration.py",
                    'return f"{hours}:{minutes:02d}:{secs:02d}"',
                    'return f"{hours}:{minutes}:{secs:02d}"',
                )
            ],
            decoy=[
                (
                    "datekit/duration.py",
                    'return f"{hours}:{minutes}:{secs:02d}"',
                    'return f"{hours:02d}:{minutes:02d}:{secs:02d}"',
                )
            ],
            tests=[
                (
                    "tests/test_duration.py",
                    "\n\ndef test_format_pads_minutes():\n"
                    '    assert format_duration(3903) == "1:05:03"\n'
                    '    assert format_duration(36000) == "10:00:00"\n',
                )
            ],
        ),
        InstanceSpec(
            number=5,
            created_at="2024-07-08T09:30:00Z",
            problem_statement=(
                "add_months() crashes at the end of a month\n\n"
                "`add_months(date(2023, 1, 31), 1)` raises `ValueError: day is out of range for "
                "month`. It should clamp to the last day of the shorter month: 2023-02-28 (and "
                "2024-02-29 in a leap year), while `add_months(date(2023, 1, 31), 2)` stays on the "
                "31st.\n"
            ),
            bug=[
                (
                    "datekit/cal.py",
                    "    return date(year, month, min(day.day, days_in_month(year, month)))\n",
                    "    return date(year, month, day.day)\n",
                )
            ],
            decoy=[
                (
                    "datekit/cal.py",
                    "    return date(year, month, day.day)\n",
                    "    return date(year, month, min(day.day, 28))\n",
                )
            ],
            tests=[
                (
                    "tests/test_cal.py",
                    "\n\ndef test_add_months_clamps():\n"
                    "    assert add_months(date(2023, 1, 31), 1) == date(2023, 2, 28)\n"
                    "    assert add_months(date(2024, 1, 31), 1) == date(2024, 2, 29)\n"
                    "    assert add_months(date(2023, 1, 31), 2) == date(2023, 3, 31)\n",
                )
            ],
        ),
    ],
)
