"""wedgewatch/textkit: wrapping, number formatting and word helpers."""

from __future__ import annotations

from wedgewatch.suites.authoring.spec import InstanceSpec, RepoSpec

WRAP = '''"""Word wrapping."""


def wrap(text, width):
    """Greedy word wrap into lines of at most ``width`` characters.

    A word longer than ``width`` gets a line of its own.
    """
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def indent(text, prefix="    "):
    """Prefix every non-empty line of ``text``."""
    return "\\n".join(prefix + line if line else line for line in text.split("\\n"))
'''

NUMBERS = '''"""Number formatting."""


def format_number(value, places=2):
    """Thousands separators and ``places`` decimals: 1234.5 -> "1,234.50"."""
    return f"{value:,.{places}f}"


def format_percent(fraction, places=0):
    """0.256 -> "26%"."""
    return f"{fraction * 100:.{places}f}%"
'''

WORDS = '''"""Word helpers."""

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}


def title_case(text):
    """Capitalise each word; small words stay lower-case unless they come first or last."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        lower = word.lower()
        if lower in SMALL_WORDS and 0 < i < len(words) - 1:
            out.append(lower)
        else:
            out.append(lower[:1].upper() + lower[1:])
    return " ".join(out)


def pluralize(word, count):
    """"3 apples"; exactly one keeps the singular; words ending in s, x, ch or sh take "es"."""
    if count == 1:
        return f"{count} {word}"
    if word.endswith(("s", "x", "ch", "sh")):
        return f"{count} {word}es"
    return f"{count} {word}s"


def truncate(text, limit, ellipsis="..."):
    """Cut ``text`` to at most ``limit`` characters, ending with ``ellipsis`` when cut."""
    if len(text) <= limit:
        return text
    if limit <= len(ellipsis):
        return ellipsis[:limit]
    return text[: limit - len(ellipsis)] + ellipsis
'''

TEST_WRAP = """from textkit.wrap import indent, wrap


def test_wrap_short_text():
    assert wrap("hello", 10) == ["hello"]


def test_wrap_breaks_long_text():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_long_word():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_indent():
    assert indent("a\\n\\nb", "> ") == "> a\\n\\n> b"
"""

TEST_NUMBERS = """from textkit.numbers import format_number, format_percent


def test_format_number_default():
    assert format_number(1234.5) == "1,234.50"


def test_format_number_small():
    assert format_number(0.5) == "0.50"


def test_format_percent():
    assert format_percent(0.256) == "26%"
"""

TEST_WORDS = """from textkit.words import pluralize, title_case, truncate


def test_title_case_small_words_inside():
    assert title_case("war and peace") == "War and Peace"


def test_title_case_last_word():
    assert title_case("what dreams are made of") == "What Dreams Are Made Of"


def test_pluralize_one():
    assert pluralize("apple", 1) == "1 apple"


def test_pluralize_many():
    assert pluralize("apple", 3) == "3 apples"
    assert pluralize("box", 2) == "2 boxes"


def test_truncate_short_text_unchanged():
    assert truncate("short", 10) == "short"
"""

REPO = RepoSpec(
    repo="wedgewatch/textkit",
    files={
        "README.md": "# textkit\n\nWrapping, number formatting and word helpers.\n",
        "textkit/__init__.py": '"""Text helpers."""\n',
        "textkit/wrap.py": WRAP,
        "textkit/numbers.py": NUMBERS,
        "textkit/words.py": WORDS,
        "tests/test_wrap.py": TEST_WRAP,
        "tests/test_numbers.py": TEST_NUMBERS,
        "tests/test_words.py": TEST_WORDS,
    },
    instances=[
        InstanceSpec(
            number=1,
            created_at="2024-03-11T10:00:00Z",
            problem_statement=(
                "wrap() breaks lines one character too early\n\n"
                '`wrap("aaa bbb", 7)` returns `["aaa", "bbb"]`, although "aaa bbb" is exactly 7 '
                "characters and fits. A line may be as long as the width, never longer.\n"
            ),
            bug=[
                (
                    "textkit/wrap.py",
                    "len(current) + 1 + len(word) <= width",
                    "len(current) + 1 + len(word) < width",
                )
            ],
            decoy=[
                (
                    "textkit/wrap.py",
                    "len(current) + 1 + len(word) < width",
                    "len(current) + len(word) <= width",
                )
            ],
            tests=[
                (
                    "tests/test_wrap.py",
                    "\n\ndef test_wrap_exact_fit():\n"
                    '    assert wrap("aaa bbb", 7) == ["aaa bbb"]\n'
                    '    assert wrap("ab cd ef", 5) == ["ab cd", "ef"]\n'
                    '    assert wrap("abc de", 5) == ["abc", "de"]\n',
                )
            ],
        ),
        InstanceSpec(
            number=2,
            created_at="2024-03-19T13:40:00Z",
            problem_statement=(
                "format_number() ignores `places`\n\n"
                "`format_number(3.14159, places=3)` gives `'3.14'` and `format_number(2, places=0)` "
                "gives `'2.00'`: the number of decimals is always two, whatever `places` says.\n"
            ),
            bug=[
                (
                    "textkit/numbers.py",
                    'return f"{value:,.{places}f}"',
                    'return f"{value:,.2f}"',
                )
            ],
            decoy=[
                (
                    "textkit/numbers.py",
                    'return f"{value:,.2f}"',
                    'return f"{value:,.{places}}"',
                )
            ],
            tests=[
                (
                    "tests/test_numbers.py",
                    "\n\ndef test_format_number_places():\n"
                    '    assert format_number(3.14159, places=3) == "3.142"\n'
                    '    assert format_number(2, places=0) == "2"\n'
                    '    assert format_number(1234567.891, places=1) == "1,234,567.9"\n',
                )
            ],
        ),
        InstanceSpec(
            number=3,
            created_at="2024-04-02T09:15:00Z",
            problem_statement=(
                "title_case() keeps a small first word lower-case\n\n"
                '`title_case("the lord of the rings")` returns `"the Lord of the Rings"`. A title '
                "always starts with a capital, even when its first word is a small word like "
                '"the" or "a".\n'
            ),
            bug=[
                (
                    "textkit/words.py",
                    "if lower in SMALL_WORDS and 0 < i < len(words) - 1:",
                    "if lower in SMALL_WORDS and i < len(words) - 1:",
                )
            ],
            decoy=[
                (
                    "textkit/words.py",
                    "if lower in SMALL_WORDS and i < len(words) - 1:",
                    'if lower in SMALL_WORDS and i < len(words) - 1 and lower != "the":',
                )
            ],
            tests=[
                (
                    "tests/test_words.py",
                    "\n\ndef test_title_case_small_first_word():\n"
                    '    assert title_case("the lord of the rings") == "The Lord of the Rings"\n'
                    '    assert title_case("a tale of two cities") == "A Tale of Two Cities"\n',
                )
            ],
        ),
        InstanceSpec(
            number=4,
            created_at="2024-04-16T15:50:00Z",
            problem_statement=(
                "pluralize() uses the singular for zero\n\n"
                '`pluralize("apple", 0)` returns `"0 apple"`; English says "0 apples" (and '
                '"0 boxes"). Only a count of exactly one takes the singular.\n'
            ),
            bug=[("textkit/words.py", "    if count == 1:\n", "    if count <= 1:\n")],
            decoy=[
                (
                    "textkit/words.py",
                    "    if count <= 1:\n",
                    '    if count == 0:\n        return f"{count} {word}s"\n    if count <= 1:\n',
                )
            ],
            tests=[
                (
                    "tests/test_words.py",
                    "\n\ndef test_pluralize_zero():\n"
                    '    assert pluralize("apple", 0) == "0 apples"\n'
                    '    assert pluralize("box", 0) == "0 boxes"\n',
                )
            ],
        ),
        InstanceSpec(
            number=5,
            created_at="2024-05-06T12:25:00Z",
            problem_statement=(
                "truncate() returns strings longer than the limit\n\n"
                '`truncate("hello world", 8)` returns `"hello wo..."`, eleven characters. The '
                'result, ellipsis included, must be at most `limit` characters: here `"hello..."`.\n'
            ),
            bug=[
                (
                    "textkit/words.py",
                    "    return text[: limit - len(ellipsis)] + ellipsis\n",
                    "    return text[:limit] + ellipsis\n",
                )
            ],
            decoy=[
                (
                    "textkit/words.py",
                    "    return text[:limit] + ellipsis\n",
                    "    return text[: limit - 1] + ellipsis\n",
                )
            ],
            tests=[
                (
                    "tests/test_words.py",
                    "\n\ndef test_truncate_respects_limit():\n"
                    '    assert truncate("hello world", 8) == "hello..."\n'
                    '    assert len(truncate("abcdefghij", 5)) == 5\n'
                    '    assert truncate("abcdefghij", 6, ellipsis="~") == "abcde~"\n',
                )
            ],
            hints_text="The ellipsis counts towards the limit.",
        ),
    ],
)
