"""wedgewatch/toylib: sequence, number and text helpers."""

from __future__ import annotations

from wedgewatch.suites.authoring.spec import InstanceSpec, RepoSpec

SEQ = '''"""Sequence helpers."""


def chunk(items, size):
    """Split ``items`` into lists of ``size`` items; the last list may be shorter."""
    if size < 1:
        raise ValueError("size must be at least 1")
    items = list(items)
    return [items[i : i + size] for i in range(0, len(items), size)]


def flatten(items, depth=1):
    """Flatten nested lists and tuples by ``depth`` levels (``depth=None``: completely)."""
    out = []
    for item in items:
        if isinstance(item, (list, tuple)) and (depth is None or depth > 0):
            out.extend(flatten(item, None if depth is None else depth - 1))
        else:
            out.append(item)
    return out


def dedupe(items):
    """Drop repeated items, keeping the first occurrence of each and the order."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
'''

NUM = '''"""Number helpers."""


def clamp(value, low, high):
    """Limit ``value`` to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """Arithmetic mean. An empty sequence is a ValueError."""
    values = list(values)
    if not values:
        raise ValueError("mean of empty sequence")
    return sum(values) / len(values)


def percent(part, whole, digits=1):
    """``part`` as a percentage of ``whole``, rounded to ``digits`` decimals (0 when whole is 0)."""
    if whole == 0:
        return 0.0
    return round(100 * part / whole, digits)
'''

TEXT = '''"""Text helpers."""

import re


def slugify(text, sep="-"):
    """Lower-case ``text`` and join its words with ``sep``: "Hello, World!" -> "hello-world"."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return sep.join(words)


def initials(name):
    """"Ada Lovelace" -> "AL"."""
    return "".join(part[0].upper() for part in name.split())
'''

TEST_SEQ = """import pytest

from toylib.seq import chunk, dedupe, flatten


def test_chunk_even():
    assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_chunk_rejects_zero_size():
    with pytest.raises(ValueError):
        chunk([1, 2], 0)


def test_flatten_explicit_depth():
    assert flatten([1, [2, [3, [4]]]], depth=2) == [1, 2, 3, [4]]


def test_flatten_completely():
    assert flatten([1, [2, [3, [4]]]], depth=None) == [1, 2, 3, 4]


def test_dedupe_keeps_order():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]
"""

TEST_NUM = """import pytest

from toylib.num import clamp, mean, percent


def test_clamp_inside():
    assert clamp(5, 1, 10) == 5


def test_clamp_outside():
    assert clamp(-3, 1, 10) == 1
    assert clamp(42, 1, 10) == 10


def test_clamp_inverted_range():
    with pytest.raises(ValueError):
        clamp(1, 5, 3)


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_percent():
    assert percent(1, 3) == 33.3
    assert percent(1, 0) == 0.0
"""

TEST_TEXT = """from toylib.text import initials, slugify


def test_slugify_simple():
    assert slugify("hello") == "hello"
    assert slugify("Hello World") == "hello-world"


def test_slugify_separator():
    assert slugify("a b", sep="_") == "a_b"


def test_initials():
    assert initials("Ada Lovelace") == "AL"
"""

REPO = RepoSpec(
    repo="wedgewatch/toylib",
    files={
        "README.md": "# toylib\n\nSmall sequence, number and text helpers.\n",
        "toylib/__init__.py": '"""Small helpers."""\n',
        "toylib/seq.py": SEQ,
        "toylib/num.py": NUM,
        "toylib/text.py": TEXT,
        "tests/test_seq.py": TEST_SEQ,
        "tests/test_num.py": TEST_NUM,
        "tests/test_text.py": TEST_TEXT,
    },
    instances=[
        InstanceSpec(
            number=1,
            created_at="2024-01-08T09:12:00Z",
            problem_statement=(
                "chunk() silently drops items\n\n"
                "When the length of the input is not a multiple of the chunk size, the last items "
                "disappear:\n\n"
                "    >>> from toylib.seq import chunk\n"
                "    >>> chunk([1, 2, 3, 4, 5], 2)\n"
                "    [[1, 2], [3, 4]]\n\n"
                "The docstring says the last list may be shorter, so I expected "
                "`[[1, 2], [3, 4], [5]]`. An input shorter than the size even gives `[]`.\n"
            ),
            bug=[
                (
                    "toylib/seq.py",
                    "range(0, len(items), size)",
                    "range(0, len(items) - size + 1, size)",
                )
            ],
            decoy=[
                (
                    "toylib/seq.py",
                    "range(0, len(items) - size + 1, size)",
                    "range(0, len(items) - 1, size)",
                )
            ],
            tests=[
                (
                    "tests/test_seq.py",
                    "\n\ndef test_chunk_partial_last():\n"
                    "    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]\n"
                    "    assert chunk([1, 2, 3], 2) == [[1, 2], [3]]\n"
                    "\n\ndef test_chunk_shorter_than_size():\n"
                    "    assert chunk([1, 2], 5) == [[1, 2]]\n",
                )
            ],
            hints_text="The range() in chunk() stops too early.",
        ),
        InstanceSpec(
            number=2,
            created_at="2024-01-15T14:30:00Z",
            problem_statement=(
                "clamp() rejects a range with equal bounds\n\n"
                "`clamp(5, 3, 3)` raises `ValueError: low must not exceed high`, but low does not "
                "exceed high here: the range [3, 3] is valid and the answer is 3. Only an inverted "
                "range such as `clamp(1, 5, 3)` should raise.\n"
            ),
            bug=[("toylib/num.py", "    if low > high:\n", "    if low >= high:\n")],
            decoy=[
                (
                    "toylib/num.py",
                    "    if low >= high:\n",
                    "    if low >= high and value != low:\n",
                )
            ],
            tests=[
                (
                    "tests/test_num.py",
                    "\n\ndef test_clamp_equal_bounds():\n"
                    "    assert clamp(3, 3, 3) == 3\n"
                    "    assert clamp(5, 3, 3) == 3\n"
                    "    assert clamp(0, 3, 3) == 3\n",
                )
            ],
        ),
        InstanceSpec(
            number=3,
            created_at="2024-02-02T08:45:00Z",
            problem_statement=(
                "mean([]) raises ZeroDivisionError\n\n"
                "`toylib.num.mean([])` fails with `ZeroDivisionError: division by zero`. The docstring "
                "promises a ValueError for an empty sequence, and callers catch ValueError. Please "
                "raise `ValueError('mean of empty sequence')`. Generators should keep working too.\n"
            ),
            bug=[
                (
                    "toylib/num.py",
                    '    if not values:\n        raise ValueError("mean of empty sequence")\n',
                    "",
                )
            ],
            decoy=[
                (
                    "toylib/num.py",
                    "    return sum(values) / len(values)\n",
                    "    if not values:\n        return 0.0\n    return sum(values) / len(values)\n",
                )
            ],
            tests=[
                (
                    "tests/test_num.py",
                    "\n\ndef test_mean_empty_raises():\n"
                    '    with pytest.raises(ValueError, match="empty"):\n'
                    "        mean([])\n"
                    "    with pytest.raises(ValueError):\n"
                    "        mean(x for x in [])\n",
                )
            ],
        ),
        InstanceSpec(
            number=4,
            created_at="2024-02-20T16:05:00Z",
            problem_statement=(
                "slugify() leaves stray separators around punctuation\n\n"
                '`slugify("Hello, World!")` returns `"hello--world-"` instead of `"hello-world"`, and '
                '`slugify("  spaced  out ")` returns `"--spaced--out-"`. Runs of anything that is not '
                "a letter or digit should become one separator, with none at either end.\n"
            ),
            bug=[
                (
                    "toylib/text.py",
                    '    words = re.findall(r"[a-z0-9]+", text.lower())\n',
                    '    words = re.split(r"[^a-z0-9]", text.lower())\n',
                )
            ],
            decoy=[
                (
                    "toylib/text.py",
                    '    words = re.split(r"[^a-z0-9]", text.lower())\n',
                    '    words = re.split(r"[^a-z0-9]+", text.lower())\n',
                )
            ],
            tests=[
                (
                    "tests/test_text.py",
                    "\n\ndef test_slugify_punctuation():\n"
                    '    assert slugify("Hello, World!") == "hello-world"\n'
                    "\n\ndef test_slugify_surrounding_space():\n"
                    '    assert slugify("  spaced  out ") == "spaced-out"\n',
                )
            ],
            hints_text="re.findall with a + quantifier avoids empty words.",
        ),
        InstanceSpec(
            number=5,
            created_at="2024-03-04T11:20:00Z",
            problem_statement=(
                "flatten() without a depth does nothing\n\n"
                "`flatten([[1, 2], [3]])` returns `[[1, 2], [3]]`. The docstring and the README "
                "say flatten removes one level of nesting by default, so this should be `[1, 2, 3]`; "
                "deeper levels stay nested unless a depth is given.\n"
            ),
            bug=[("toylib/seq.py", "def flatten(items, depth=1):", "def flatten(items, depth=0):")],
            decoy=[("toylib/seq.py", "def flatten(items, depth=0):", "def flatten(items, depth=None):")],
            tests=[
                (
                    "tests/test_seq.py",
                    "\n\ndef test_flatten_default_one_level():\n"
                    "    assert flatten([[1, 2], [3]]) == [1, 2, 3]\n"
                    "    assert flatten([1, [2, [3]]]) == [1, 2, [3]]\n",
                )
            ],
        ),
    ],
)
