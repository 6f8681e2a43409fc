"""wedgewatch/shopkit: money, a cart, stock, CSV lines and settings (bugs that span more code).

Long because it is data: the bundled repository's source files, held here as strings, and the
instances written against them; split, one repository would be read across several modules."""

from __future__ import annotations

from wedgewatch.suites.authoring.spec import InstanceSpec, RepoSpec

MONEY = '''"""Money: Decimal amounts rounded half-up to cents."""

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def to_money(value):
    """A Decimal rounded half-up to cents (what a till does, not banker's rounding)."""
    return Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP)


def format_money(amount, symbol="$"):
    """"$1,234.50"; a negative amount as "-$3.00"."""
    amount = to_money(amount)
    sign = "-" if amount < 0 else ""
    return f"{sign}{symbol}{abs(amount):,.2f}"
'''

CART = '''"""A shopping cart."""

from decimal import Decimal

from shopkit.money import format_money, to_money


class Cart:
    def __init__(self):
        self.lines = []  # (sku, unit price, quantity)

    def add(self, sku, unit_price, quantity=1):
        """Add a line; a negative unit price is a refund."""
        if quantity < 1:
            raise ValueError("quantity must be at least 1")
        self.lines.append((sku, to_money(unit_price), quantity))

    def subtotal(self):
        return sum((price * qty for _, price, qty in self.lines), to_money(0))

    def total(self, discount_percent=0):
        """The subtotal less ``discount_percent`` percent, rounded to cents."""
        if not 0 <= discount_percent <= 100:
            raise ValueError("discount must be between 0 and 100")
        return to_money(self.subtotal() * (100 - Decimal(discount_percent)) / 100)

    def receipt(self, discount_percent=0):
        """One line per item, then the total; every amount formatted with format_money."""
        lines = [f"{sku} x{qty}: {format_money(price * qty)}" for sku, price, qty in self.lines]
        lines.append(f"total: {format_money(self.total(discount_percent))}")
        return "\\n".join(lines)
'''

INVENTORY = '''"""Stock counts."""


class OutOfStock(Exception):
    """More was asked for than is in stock."""


class Inventory:
    def __init__(self):
        self._stock = {}

    def add(self, sku, quantity):
        if quantity < 1:
            raise ValueError("quantity must be at least 1")
        self._stock[sku] = self._stock.get(sku, 0) + quantity

    def remove(self, sku, quantity):
        """Take ``quantity`` out of stock; asking for more than there is raises OutOfStock."""
        have = self._stock.get(sku, 0)
        if quantity > have:
            raise OutOfStock(f"{sku}: have {have}, asked for {quantity}")
        self._stock[sku] = have - quantity

    def count(self, sku):
        return self._stock.get(sku, 0)
'''

CSVLINE = '''"""One line of CSV."""


def split_line(line, sep=","):
    """Split one CSV line. Double quotes protect separators; "" inside quotes is one quote."""
    fields = []
    field = []
    quoted = False
    i = 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"':
                if i + 1 < len(line) and line[i + 1] == '"':
                    field.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                field.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == sep:
            fields.append("".join(field))
            field = []
        else:
            field.append(ch)
        i += 1
    fields.append("".join(field))
    return fields
'''

SETTINGS = '''"""Settings from "key = value" lines; # starts a comment."""


class Settings:
    def __init__(self, text=""):
        self._values = {}
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"not a setting: {raw!r}")
            self._values[key.strip()] = value.strip()

    def get(self, key, default=None):
        return self._values.get(key, default)

    def get_bool(self, key, default=False):
        """1, true, yes and on are true (any case); a missing key gives ``default``."""
        value = self._values.get(key)
        if value is None:
            return default
        return value.lower() in ("1", "true", "yes", "on")

    def get_int(self, key, default=0):
        value = self._values.get(key)
        return default if value is None else int(value)
'''

TEST_MONEY = """from decimal import Decimal

from shopkit.money import format_money, to_money


def test_to_money_rounds_half_up():
    assert to_money("2.675") == Decimal("2.68")
    assert to_money(1) == Decimal("1.00")


def test_format_money():
    assert format_money(1234.5) == "$1,234.50"
    assert format_money(3, symbol="EUR ") == "EUR 3.00"
"""

TEST_CART = """from decimal import Decimal

import pytest

from shopkit.cart import Cart


def test_subtotal():
    cart = Cart()
    cart.add("apple", "0.50", 4)
    cart.add("pear", "1.25")
    assert cart.subtotal() == Decimal("3.25")


def test_total_without_discount():
    cart = Cart()
    cart.add("apple", "0.50", 4)
    assert cart.total() == Decimal("2.00")


def test_total_rejects_bad_discount():
    cart = Cart()
    with pytest.raises(ValueError):
        cart.total(150)


def test_receipt_small():
    cart = Cart()
    cart.add("apple", "0.50", 2)
    assert cart.receipt() == "apple x2: $1.00\\ntotal: $1.00"
"""

TEST_INVENTORY = """import pytest

from shopkit.inventory import Inventory


def test_add_and_count():
    inv = Inventory()
    inv.add("bolt", 5)
    inv.add("bolt", 2)
    assert inv.count("bolt") == 7
    assert inv.count("nut") == 0


def test_remove_some():
    inv = Inventory()
    inv.add("bolt", 5)
    inv.remove("bolt", 3)
    assert inv.count("bolt") == 2


def test_add_rejects_zero():
    with pytest.raises(ValueError):
        Inventory().add("bolt", 0)
"""

TEST_CSVLINE = """from shopkit.csvline import split_line


def test_plain_fields():
    assert split_line("a,b,c") == ["a", "b", "c"]


def test_quoted_separator():
    assert split_line('a,"b,c",d') == ["a", "b,c", "d"]


def test_empty_fields():
    assert split_line(",x,") == ["", "x", ""]
"""

TEST_SETTINGS = '''from shopkit.settings import Settings

TEXT = """
# a comment
name = shop   # trailing comment
workers = 4
debug = yes
"""


def test_get():
    s = Settings(TEXT)
    assert s.get("name") == "shop"
    assert s.get("missing") is None


def test_get_int():
    s = Settings(TEXT)
    assert s.get_int("workers") == 4
    assert s.get_int("missing", 7) == 7


def test_get_bool_present():
    assert Settings(TEXT).get_bool("debug") is True
'''

REPO = RepoSpec(
    repo="wedgewatch/shopkit",
    files={
        "README.md": "# shopkit\n\nMoney, a cart, stock counts, CSV lines and settings.\n",
        "shopkit/__init__.py": '"""A tiny shop."""\n',
        "shopkit/money.py": MONEY,
        "shopkit/cart.py": CART,
        "shopkit/inventory.py": INVENTORY,
        "shopkit/csvline.py": CSVLINE,
        "shopkit/settings.py": SETTINGS,
        "tests/test_money.py": TEST_MONEY,
        "tests/test_cart.py": TEST_CART,
        "tests/test_inventory.py": TEST_INVENTORY,
        "tests/test_csvline.py": TEST_CSVLINE,
        "tests/test_settings.py": TEST_SETTINGS,
    },
    instances=[
        InstanceSpec(
            number=1,
            created_at="2024-07-22T11:00:00Z",
            problem_statement=(
                "Cart.total() adds the discount instead of taking it off\n\n"
                "A cart of two items at 10.00 with `total(25)` comes to 25.00; a 25% discount "
                "should make it 15.00. Without a discount the total is right.\n"
            ),
            bug=[
                (
                    "shopkit/cart.py",
                    "(100 - Decimal(discount_percent))",
                    "(100 + Decimal(discount_percent))",
                )
            ],
            decoy=[
                (
                    "shopkit/cart.py",
                    "        return to_money(self.subtotal() * (100 + Decimal(discount_percent)) / 100)\n",
                    "        return to_money(self.subtotal() - Decimal(discount_percent))\n",
                )
            ],
            tests=[
                (
                    "tests/test_cart.py",
                    "\n\ndef test_total_with_discount():\n"
                    "    cart = Cart()\n"
                    '    cart.add("book", "10.00", 2)\n'
                    '    assert cart.total(25) == Decimal("15.00")\n'
                    '    assert cart.total(10) == Decimal("18.00")\n'
                    '    assert cart.total(100) == Decimal("0.00")\n',
                )
            ],
        ),
        InstanceSpec(
            number=2,
            created_at="2024-08-05T15:20:00Z",
            problem_statement=(
                "Inventory.remove() lets stock go negative\n\n"
                "With 3 bolts in stock, `inv.remove('bolt', 5)` succeeds and `inv.count('bolt')` "
                "is then -2. Asking for more than there is should raise `OutOfStock` and leave the "
                "count unchanged, also for a SKU that was never added.\n"
            ),
            bug=[
                (
                    "shopkit/inventory.py",
                    "        if quantity > have:\n"
                    '            raise OutOfStock(f"{sku}: have {have}, asked for {quantity}")\n',
                    "",
                )
            ],
            decoy=[
                (
                    "shopkit/inventory.py",
                    "        self._stock[sku] = have - quantity\n",
                    "        if have == 0:\n"
                    '            raise OutOfStock(f"{sku}: none in stock")\n'
                    "        self._stock[sku] = have - quantity\n",
                )
            ],
            tests=[
                (
                    "tests/test_inventory.py",
                    "\n\ndef test_remove_too_many():\n"
                    "    from shopkit.inventory import OutOfStock\n"
                    "\n"
                    "    inv = Inventory()\n"
                    '    inv.add("bolt", 3)\n'
                    "    with pytest.raises(OutOfStock):\n"
                    '        inv.remove("bolt", 5)\n'
                    '    assert inv.count("bolt") == 3\n'
                    "\n\ndef test_remove_unknown_sku():\n"
                    "    from shopkit.inventory import OutOfStock\n"
                    "\n"
                    "    with pytest.raises(OutOfStock):\n"
                    '        Inventory().remove("nut", 1)\n',
                )
            ],
        ),
        InstanceSpec(
            number=3,
            created_at="2024-08-19T10:40:00Z",
            problem_statement=(
                "split_line() loses doubled quotes\n\n"
                "In CSV a quote inside a quoted field is written twice. "
                "`split_line('a,\"say \"\"hi\"\"\",b')` returns `['a', 'say hi', 'b']` "
                "instead of `['a', 'say \"hi\"', 'b']`.\n"
            ),
            bug=[
                (
                    "shopkit/csvline.py",
                    "            if ch == '\"':\n"
                    "                if i + 1 < len(line) and line[i + 1] == '\"':\n"
                    "                    field.append('\"')\n"
                    "                    i += 1\n"
                    "                else:\n"
                    "                    quoted = False\n",
                    "            if ch == '\"':\n                quoted = False\n",
                )
            ],
            decoy=[
                (
                    "shopkit/csvline.py",
                    "            if ch == '\"':\n                quoted = False\n",
                    "            if ch == '\"':\n"
                    "                if i + 1 < len(line) and line[i + 1] == '\"':\n"
                    "                    field.append('\"')\n"
                    "                else:\n"
                    "                    quoted = False\n",
                )
            ],
            tests=[
                (
                    "tests/test_csvline.py",
                    "\n\ndef test_doubled_quotes():\n"
                    "    assert split_line('a,\"say \"\"hi\"\"\",b') == ['a', 'say \"hi\"', 'b']\n"
                    "    assert split_line('\"a\"\"b\",c') == ['a\"b', 'c']\n",
                )
            ],
            hints_text='Inside quotes, "" stands for one quote character.',
        ),
        InstanceSpec(
            number=4,
            created_at="2024-09-02T13:15:00Z",
            problem_statement=(
                "Settings.get_bool() of a missing key is True\n\n"
                "`Settings('').get_bool('debug')` returns True, so every feature flag is on until "
                "it is written down. A missing key should give False unless the caller passes a "
                "default: `get_bool('debug', default=True)` is True.\n"
            ),
            bug=[
                (
                    "shopkit/settings.py",
                    "    def get_bool(self, key, default=False):",
                    "    def get_bool(self, key, default=True):",
                )
            ],
            decoy=[
                (
                    "shopkit/settings.py",
                    "        if value is None:\n            return default\n        return value.lower()",
                    "        if value is None:\n            return False\n        return value.lower()",
                )
            ],
            tests=[
                (
                    "tests/test_settings.py",
                    "\n\ndef test_get_bool_missing():\n"
                    '    assert Settings("").get_bool("debug") is False\n'
                    '    assert Settings("").get_bool("debug", default=True) is True\n',
                )
            ],
        ),
        InstanceSpec(
            number=5,
            created_at="2024-09-16T16:55:00Z",
            problem_statement=(
                "Receipts format refunds and large totals wrongly\n\n"
                "A refund line shows as `refund x1: $-3.00` and a large total as "
                "`total: $1234.50`. Every amount on a receipt should look like `format_money` "
                "output: `-$3.00` (sign before the symbol) and `$1,234.50`. `format_money(-3)` "
                "itself also gives `$-3.00`.\n"
            ),
            bug=[
                (
                    "shopkit/money.py",
                    '    sign = "-" if amount < 0 else ""\n    return f"{sign}{symbol}{abs(amount):,.2f}"\n',
                    '    return f"{symbol}{amount:,.2f}"\n',
                ),
                (
                    "shopkit/cart.py",
                    '        lines.append(f"total: {format_money(self.total(discount_percent))}")\n',
                    '        lines.append(f"total: ${self.total(discount_percent)}")\n',
                ),
            ],
            decoy=[
                (
                    "shopkit/cart.py",
                    '        lines.append(f"total: ${self.total(discount_percent)}")\n',
                    '        lines.append(f"total: {format_money(self.total(discount_percent))}")\n',
                )
            ],
            tests=[
                (
                    "tests/test_money.py",
                    "\n\ndef test_format_money_negative():\n"
                    '    assert format_money(-3) == "-$3.00"\n'
                    '    assert format_money("-1234.5") == "-$1,234.50"\n',
                ),
                (
                    "tests/test_cart.py",
                    "\n\ndef test_receipt_large_total():\n"
                    "    cart = Cart()\n"
                    '    cart.add("desk", "1234.50")\n'
                    '    assert cart.receipt().splitlines()[-1] == "total: $1,234.50"\n'
                    "\n\ndef test_receipt_refund_line():\n"
                    "    cart = Cart()\n"
                    '    cart.add("lamp", "20.00")\n'
                    '    cart.add("refund", "-3.00")\n'
                    '    assert cart.receipt() == "lamp x1: $20.00\\nrefund x1: -$3.00\\ntotal: $17.00"\n',
                ),
            ],
            hints_text="Two places: format_money's sign and the receipt's total line.",
        ),
    ],
)
