"""Python sessions: unittest (no pytest here), venvs, vendored wheels (--no-index)."""
from gen_common import Session, sq

PIPI = "--no-index --find-links ../vendor/py"


def feature_loop(s, mod, testdir, feats, run_tests, lint=None):
    """Add each feature: code (with its bug, if any), a test file, run, fix with sed, commit."""
    for i, f in enumerate(feats):
        explore = [
            "git status --short", "ls", f"ls {testdir}", f"grep -n 'def ' {mod}",
            f"wc -l {mod}", f"sed -n '1,30p' {mod}", "git log --oneline -3",
            f"grep -rn 'import' {testdir}", f"head -20 {mod}", f"cat {testdir}/" + (feats[i - 1]['tname'] if i else feats[0]['tname']) if i else f"ls -la {testdir}",
        ]
        for e in s.rng.sample(explore, s.rng.choice([2, 2, 3, 3])):
            s.c(e)
        code = f["code"]
        if f.get("bug"):
            code = code.replace(f["bug"][1], f["bug"][0])
        s.append(mod, "\n\n" + code.strip("\n"))
        s.write(f"{testdir}/{f['tname']}", f["test"], how=s.pick(["cat", "cat", "tee"]))
        if f.get("bug"):
            s.fail(run_tests)
            s.c(s.pick([f"grep -nF {sq(f['bug'][0].strip()[:30])} {mod}", f"sed -n '/def {f['name']}/,/^$/p' {mod}", f"grep -n 'def {f['name']}' {mod}"]))
            s.sed(mod, f["bug"][0], f["bug"][1])
        s.c(run_tests)
        if lint and s.rng.random() < 0.5:
            s.c(lint)
        if s.rng.random() < 0.4:
            s.c(s.pick(["git diff", f"git diff {mod}", "git diff --stat"]))
        s.commit(f["msg"])


def textkit():
    s = Session("python", 1, "textkit", "Start a small string-utilities package from scratch: venv, pyproject, "
                "editable install, features test-first, one bug per few features fixed with sed.")
    s.c("ls -la")
    s.c("mkdir -p textkit/src/textkit textkit/tests")
    s.cwd = "textkit"
    s.c("git init -q")
    s.c("python3 -m venv .venv")
    s.c("printf '.venv/\\n__pycache__/\\n*.egg-info/\\nbuild/\\n' > .gitignore")
    s.write("pyproject.toml", '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "textkit"
version = "0.1.0"
description = "Small string helpers"
requires-python = ">=3.9"

[tool.setuptools.packages.find]
where = ["src"]''')
    s.write("src/textkit/__init__.py", '"""textkit: small string helpers."""\n__version__ = "0.1.0"')
    s.write("src/textkit/strings.py", '"""String helpers."""\nimport re')
    s.write("README.md", "# textkit\n\nSmall string helpers: slugify, word counts, truncation.\n")
    s.c(f".venv/bin/pip install {PIPI} wheel")
    s.c(".venv/bin/pip install --no-index --no-build-isolation -e .")
    s.c(".venv/bin/pip list")
    s.commit("Scaffold textkit package")
    feats = [
        dict(name="slugify", tname="test_slugify.py", msg="Add slugify", code='''def slugify(text):
    """Lower-case, keep letters and digits, join words with dashes."""
    text = text.lower().strip()
    text = re.sub(r"[^a-z0-9]+", "-", text)
    return text.strip("-")''', bug=('"_", text)', '"-", text)'), test='''import unittest
from textkit.strings import slugify


class SlugifyTest(unittest.TestCase):
    def test_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation(self):
        self.assertEqual(slugify("  Rust, Go & Python!  "), "rust-go-python")

    def test_empty(self):
        self.assertEqual(slugify(""), "")


if __name__ == "__main__":
    unittest.main()'''),
        dict(name="word_count", tname="test_word_count.py", msg="Add word_count", code='''def word_count(text):
    """Count words (runs of letters, digits or apostrophes)."""
    counts = {}
    for word in re.findall(r"[a-z0-9']+", text.lower()):
        counts[word] = counts.get(word, 0) + 1
    return counts''', test='''import unittest
from textkit.strings import word_count


class WordCountTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(word_count("the cat and the hat"), {"the": 2, "cat": 1, "and": 1, "hat": 1})

    def test_case_insensitive(self):
        self.assertEqual(word_count("Go go GO"), {"go": 3})'''),
        dict(name="truncate", tname="test_truncate.py", msg="Add truncate with ellipsis", code='''def truncate(text, width, ellipsis="..."):
    """Cut text to at most width characters, ending with the ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[: width - len(ellipsis)] + ellipsis''', bug=("text[: width - len(ellipsis) + 1]", "text[: width - len(ellipsis)]"), test='''import unittest
from textkit.strings import truncate


class TruncateTest(unittest.TestCase):
    def test_short_unchanged(self):
        self.assertEqual(truncate("abc", 10), "abc")

    def test_cut(self):
        self.assertEqual(truncate("abcdefghij", 8), "abcde...")
        self.assertEqual(len(truncate("x" * 50, 12)), 12)'''),
        dict(name="camel_to_snake", tname="test_case.py", msg="Add camel_to_snake", code='''def camel_to_snake(name):
    """parseHTTPResponse -> parse_http_response"""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\\1_\\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\\1_\\2", name)
    return name.lower()''', test='''import unittest
from textkit.strings import camel_to_snake


class CamelToSnakeTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(camel_to_snake("fooBar"), "foo_bar")

    def test_acronym(self):
        self.assertEqual(camel_to_snake("parseHTTPResponse"), "parse_http_response")'''),
        dict(name="is_palindrome", tname="test_palindrome.py", msg="Add is_palindrome ignoring punctuation", code='''def is_palindrome(text):
    letters = [c for c in text.lower() if c.isalnum()]
    return letters == letters[::-1]''', bug=("letters == letters[::1]", "letters == letters[::-1]"), test='''import unittest
from textkit.strings import is_palindrome


class PalindromeTest(unittest.TestCase):
    def test_yes(self):
        self.assertTrue(is_palindrome("A man, a plan, a canal: Panama"))

    def test_no(self):
        self.assertFalse(is_palindrome("brainloop"))'''),
    ]
    run = s.pick([".venv/bin/python -m unittest discover -s tests", ".venv/bin/python -m unittest discover -s tests -v"])
    feature_loop(s, "src/textkit/strings.py", "tests", feats, run, lint=".venv/bin/python -m py_compile src/textkit/strings.py")
    s.c("grep -rn 'def ' src/textkit/")
    s.append("README.md", "\n## Usage\n\n```python\nfrom textkit.strings import slugify, truncate\nslugify(\"Hello World\")  # 'hello-world'\n```")
    s.sed("pyproject.toml", 'version = "0.1.0"', 'version = "0.2.0"')
    s.sed("src/textkit/__init__.py", '__version__ = "0.1.0"', '__version__ = "0.2.0"')
    s.c("grep -rn '0.2.0' pyproject.toml src/")
    s.c(".venv/bin/python -c 'import textkit; print(textkit.__version__)'")
    s.commit("Release 0.2.0 with usage notes")
    s.c("git checkout -b wrap")
    s.write("src/textkit/wrap.py", '''"""Greedy word wrapping."""


def wrap(text, width):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines''')
    s.write("tests/test_wrap.py", '''import unittest
from textkit.wrap import wrap


class WrapTest(unittest.TestCase):
    def test_wrap(self):
        self.assertEqual(wrap("the quick brown fox jumps", 10), ["the quick", "brown fox", "jumps"])

    def test_long_word(self):
        self.assertEqual(wrap("abcdefghijkl xy", 5), ["abcdefghijkl", "xy"])

    def test_empty(self):
        self.assertEqual(wrap("   ", 5), [])''')
    s.c(".venv/bin/python -m unittest tests.test_wrap" if False else ".venv/bin/python -m unittest discover -s tests -p 'test_wrap.py'")
    s.commit("Add greedy wrap", files=["src/textkit/wrap.py", "tests/test_wrap.py"])
    s.c("echo 'TODO: hyphenate long words' > NOTES.txt")
    s.c("git stash -u")
    s.c("git status --short")
    s.c("git stash list")
    s.c("git stash pop")
    s.c("cat NOTES.txt")
    s.c("rm NOTES.txt")
    s.c("git checkout master 2>/dev/null || git checkout main")
    s.c("git merge wrap")
    s.c(".venv/bin/python -m unittest discover -s tests")
    s.c("git log --oneline")
    return s


def inventory():
    setup = {"dir": "inventory", "git": True, "files": {
        "README.md": "# inventory\n\nA tiny stock-keeping module used by the shop scripts.\n",
        ".gitignore": "__pycache__/\n.venv/\n",
        "inventory/__init__.py": "",
        "inventory/store.py": '''"""In-memory stock store."""


class Store:
    def __init__(self):
        self.items = {}

    def add(self, sku, name, qty, price):
        if qty < 0:
            raise ValueError("qty must be >= 0")
        item = self.items.setdefault(sku, {"name": name, "qty": 0, "price": price, "tags": []})
        item["qty"] += qty
        return item

    def remove(self, sku, qty):
        item = self.items[sku]
        if qty > item["qty"]:
            raise ValueError(f"only {item['qty']} of {sku} in stock")
        item["qty"] -= qty
        return item["qty"]
''',
        "tests/__init__.py": "",
        "tests/test_store.py": '''import unittest

from inventory.store import Store


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.s = Store()
        self.s.add("A1", "apple", 10, 0.5)

    def test_add_accumulates(self):
        self.s.add("A1", "apple", 5, 0.5)
        self.assertEqual(self.s.items["A1"]["qty"], 15)

    def test_remove(self):
        self.assertEqual(self.s.remove("A1", 4), 6)

    def test_remove_too_many(self):
        with self.assertRaises(ValueError):
            self.s.remove("A1", 11)
''',
    }}
    s = Session("python", 2, "inventory", "Work on an existing inventory project (operator-prepared, git identity set): "
                "read it, add reports on a branch, stash an experiment, fix a failing test, merge back.",
                setup=setup, identity=True)
    s.cwd = "inventory"
    for cmd in ["git status", "ls -R", "cat README.md", "cat inventory/store.py", "sed -n '1,40p' tests/test_store.py",
                "git log --oneline -5", "python3 -m unittest", "python3 -m unittest -v tests.test_store"]:
        s.c(cmd)
    s.c("grep -rn 'ValueError' inventory tests")
    s.c("find . -name '*.py' -not -path './.git/*' | xargs wc -l")
    s.c("git checkout -b reports")
    feats = [
        dict(name="total_value", tname="test_total.py", msg="Store.total_value", code='''    def total_value(self):
        return round(sum(i["qty"] * i["price"] for i in self.items.values()), 2)''', bug=('i["qty"] + i["price"]', 'i["qty"] * i["price"]'), test='''import unittest

from inventory.store import Store


class TotalTest(unittest.TestCase):
    def test_total(self):
        s = Store()
        s.add("A1", "apple", 10, 0.5)
        s.add("B2", "bread", 2, 2.25)
        self.assertEqual(s.total_value(), 9.5)'''),
        dict(name="low_stock", tname="test_low.py", msg="Store.low_stock report", code='''    def low_stock(self, threshold=3):
        return sorted(sku for sku, i in self.items.items() if i["qty"] <= threshold)''', bug=('i["qty"] < threshold', 'i["qty"] <= threshold'), test='''import unittest

from inventory.store import Store


class LowStockTest(unittest.TestCase):
    def test_threshold_inclusive(self):
        s = Store()
        s.add("A1", "apple", 3, 0.5)
        s.add("B2", "bread", 8, 2.0)
        s.add("C3", "cheese", 1, 4.0)
        self.assertEqual(s.low_stock(), ["A1", "C3"])'''),
        dict(name="tag", tname="test_tags.py", msg="Tag items and find them by tag", code='''    def tag(self, sku, *tags):
        self.items[sku]["tags"].extend(t for t in tags if t not in self.items[sku]["tags"])

    def find_by_tag(self, tag):
        return [sku for sku, i in self.items.items() if tag in i["tags"]]''', test='''import unittest

from inventory.store import Store


class TagTest(unittest.TestCase):
    def test_find(self):
        s = Store()
        s.add("A1", "apple", 3, 0.5)
        s.add("P9", "pear", 3, 0.7)
        s.tag("A1", "fruit", "red")
        s.tag("P9", "fruit")
        s.tag("A1", "fruit")
        self.assertEqual(s.find_by_tag("fruit"), ["A1", "P9"])
        self.assertEqual(s.items["A1"]["tags"], ["fruit", "red"])'''),
    ]
    feature_loop(s, "inventory/store.py", "tests", feats, s.pick(["python3 -m unittest", "python3 -m unittest discover -v"]),
                 lint="python3 -m py_compile inventory/store.py")
    # An experiment, stashed.
    s.c("sed -i 's/raise ValueError(\"qty must be >= 0\")/return None/' inventory/store.py")
    s.c("git diff")
    s.c("git stash")
    s.c("git stash list")
    s.c("python3 -m unittest")
    s.write("inventory/report.py", '''"""Plain-text stock report."""
from inventory.store import Store


def render(store: Store) -> str:
    lines = [f"{'sku':<6}{'name':<10}{'qty':>5}"]
    for sku in sorted(store.items):
        item = store.items[sku]
        lines.append(f"{sku:<6}{item['name']:<10}{item['qty']:>5}")
    lines.append(f"total value: {store.total_value():.2f}")
    return "\\n".join(lines)


if __name__ == "__main__":
    s = Store()
    s.add("A1", "apple", 10, 0.5)
    s.add("B2", "bread", 2, 2.25)
    print(render(s))''')
    s.c("python3 -m inventory.report")
    s.write("tests/test_report.py", '''import unittest

from inventory.report import render
from inventory.store import Store


class ReportTest(unittest.TestCase):
    def test_render(self):
        s = Store()
        s.add("A1", "apple", 10, 0.5)
        out = render(s).splitlines()
        self.assertEqual(out[0].split(), ["sku", "name", "qty"])
        self.assertEqual(out[1].split(), ["A1", "apple", "10"])
        self.assertEqual(out[-1], "total value: 5.00")''')
    s.c("python3 -m unittest tests.test_report")
    s.commit("Plain-text stock report", files=["inventory/report.py", "tests/test_report.py"])
    s.c("git stash pop")
    s.c("git diff --stat")
    s.c("git restore inventory/store.py")
    s.c("git stash list")
    s.c("git switch main 2>/dev/null || git switch master")
    s.c("git merge --no-edit reports")
    s.c("python3 -m unittest discover -v")
    s.c("git branch -d reports")
    s.c("git log --oneline --graph -8")
    s.c("grep -rn 'def ' inventory/")
    s.c("printf '\\n## Reports\\n\\nRun `python3 -m inventory.report` for a stock table.\\n' >> README.md")
    s.commit("Document the report")
    s.c("curl -s -m 2 http://127.0.0.1:@PORT@/api/prices.json -o prices.json", network=True)
    s.c("python3 -c 'import json; print(len(json.load(open(\"prices.json\"))))'")
    s.c("rm prices.json")
    s.c("git status --short")
    return s


def csvstats():
    setup = {"dir": "csvstats", "git": True, "bare": True, "files": {
        "README.md": "# csvstats\n\nSummary statistics for CSV columns.\n",
        ".gitignore": "__pycache__/\n.venv/\n*.egg-info/\n",
        "csvstats.py": '''"""Summary statistics for a CSV column."""
import csv
import math


def read_column(path, column):
    with open(path, newline="") as f:
        return [float(row[column]) for row in csv.DictReader(f) if row[column]]


def mean(values):
    return sum(values) / len(values)
''',
        "test_csvstats.py": '''import unittest

import csvstats


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(csvstats.mean([1, 2, 3, 4]), 2.5)


if __name__ == "__main__":
    unittest.main()
''',
        "data/sales.csv": "region,month,amount\nnorth,jan,120\nnorth,feb,80\nsouth,jan,200\nsouth,feb,\neast,jan,45.5\n",
    }}
    s = Session("python", 3, "csvstats", "Clone a CSV-statistics repo, add median/stdev/percentile and a CLI using a "
                "vendored table-printing wheel from requirements.txt, in a venv.", setup=setup)
    s.c("ls")
    s.c("git clone -q remotes/csvstats.git csvstats")
    s.cwd = "csvstats"
    for cmd in ["ls -la", "cat csvstats.py", "cat test_csvstats.py", "head -5 data/sales.csv", "wc -l data/sales.csv",
                "python3 test_csvstats.py", "git log --oneline"]:
        s.c(cmd)
    s.c("python3 -m venv .venv")
    s.c("printf 'tinytable==1.0.2\\n' > requirements.txt")
    s.c(f".venv/bin/pip install {PIPI} -r requirements.txt")
    s.c(".venv/bin/pip freeze")
    s.c(".venv/bin/python -c 'import tinytable; print(tinytable.render([[\"a\", 1]]))'")
    s.commit("Pin tinytable in requirements.txt", files=["requirements.txt"])
    feats = [
        dict(name="median", tname="test_median.py", msg="Add median", code='''def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2''', bug=("(ordered[mid - 1] + ordered[mid]) / 3", "(ordered[mid - 1] + ordered[mid]) / 2"), test='''import unittest

from csvstats import median


class MedianTest(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)'''),
        dict(name="stdev", tname="test_stdev.py", msg="Add sample standard deviation", code='''def stdev(values):
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))''', bug=("/ len(values))", "/ (len(values) - 1))"), test='''import unittest

from csvstats import stdev


class StdevTest(unittest.TestCase):
    def test_sample(self):
        self.assertAlmostEqual(stdev([2, 4, 4, 4, 5, 5, 7, 9]), 2.138, places=3)'''),
        dict(name="percentile", tname="test_percentile.py", msg="Add nearest-rank percentile", code='''def percentile(values, p):
    if not 0 < p <= 100:
        raise ValueError("p must be in (0, 100]")
    ordered = sorted(values)
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[rank - 1]''', test='''import unittest

from csvstats import percentile


class PercentileTest(unittest.TestCase):
    def test_nearest_rank(self):
        data = [15, 20, 35, 40, 50]
        self.assertEqual(percentile(data, 30), 20)
        self.assertEqual(percentile(data, 100), 50)

    def test_bad_p(self):
        with self.assertRaises(ValueError):
            percentile([1], 0)'''),
    ]
    feature_loop(s, "csvstats.py", ".", feats, ".venv/bin/python -m unittest discover -p 'test_*.py'",
                 lint=".venv/bin/python -m py_compile csvstats.py")
    s.write("cli.py", '''"""python3 cli.py FILE COLUMN: print summary statistics of a CSV column."""
import sys

import tinytable

import csvstats


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    values = csvstats.read_column(argv[1], argv[2])
    rows = [
        ["count", len(values)],
        ["mean", round(csvstats.mean(values), 2)],
        ["median", csvstats.median(values)],
        ["stdev", round(csvstats.stdev(values), 2)],
        ["p90", csvstats.percentile(values, 90)],
    ]
    print(tinytable.render(rows, header=["stat", argv[2]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))''')
    s.c(".venv/bin/python cli.py data/sales.csv amount")
    s.fail(".venv/bin/python cli.py data/sales.csv")
    s.c("grep -n 'read_column' -A3 csvstats.py")
    s.commit("Command-line summary of a CSV column", files=["cli.py"])
    s.c("git checkout -b more-data")
    s.c("printf 'west,jan,310\\nwest,feb,95.25\\n' >> data/sales.csv")
    s.c("tail -3 data/sales.csv")
    s.c(".venv/bin/python cli.py data/sales.csv amount")
    s.commit("More sample sales rows")
    s.c("git checkout -")
    s.c("git diff main..more-data --stat 2>/dev/null || git diff master..more-data --stat")
    s.c("git merge -q more-data")
    s.c("cp data/sales.csv data/sales-2025.csv")
    s.c("sed -i 's/jan/mar/; s/feb/apr/' data/sales-2025.csv")
    s.c("head -3 data/sales-2025.csv")
    s.c("rm data/sales-2025.csv")
    s.c("git status --short")
    return s


def configparse():
    s = Session("python", 4, "confkit", "Write a tiny INI-style config reader as a package, split the module as it grows "
                "(mv, cp), byte-compile and lint with compileall, a feature branch, a stash.")
    s.c("mkdir -p confkit")
    s.cwd = "confkit"
    s.c("git init -q -b main")
    s.c("mkdir -p confkit tests examples")
    s.c("touch confkit/__init__.py tests/__init__.py")
    s.write("confkit/parser.py", '''"""Parse `key = value` lines with [section] headers."""


def parse_line(line):
    """Return (key, value) for a setting, ("[", name) for a section, None for blanks and comments."""
    line = line.strip()
    if not line or line.startswith(("#", ";")):
        return None
    if line.startswith("[") and line.endswith("]"):
        return ("[", line[1:-1].strip())
    key, sep, value = line.partition("=")
    if not sep:
        raise ValueError(f"expected key = value: {line!r}")
    return (key.strip(), value.strip())''')
    s.write("tests/test_parser.py", '''import unittest

from confkit.parser import parse_line


class ParseLineTest(unittest.TestCase):
    def test_setting(self):
        self.assertEqual(parse_line("  port = 8080 "), ("port", "8080"))

    def test_section(self):
        self.assertEqual(parse_line("[server]"), ("[", "server"))

    def test_comment(self):
        self.assertIsNone(parse_line("# hi"))
        self.assertIsNone(parse_line(""))

    def test_garbage(self):
        with self.assertRaises(ValueError):
            parse_line("nonsense")''')
    s.c("python3 -m unittest discover -s . -p 'test_*.py'")
    s.c("printf '__pycache__/\\n' > .gitignore")
    s.commit("parse_line with tests")
    feats = [
        dict(name="parse", tname="test_parse.py", msg="parse(): sections into nested dicts", code='''def parse(text):
    config = {"": {}}
    section = ""
    for line in text.splitlines():
        item = parse_line(line)
        if item is None:
            continue
        if item[0] == "[":
            section = item[1]
            config.setdefault(section, {})
        else:
            config[section][item[0]] = item[1]
    return config''', bug=("config[section][item[1]] = item[1]", "config[section][item[0]] = item[1]"), test='''import unittest

from confkit.parser import parse

SAMPLE = """
name = demo
[server]
host = 127.0.0.1
port = 8080
; comment
[log]
level = info
"""


class ParseTest(unittest.TestCase):
    def test_sections(self):
        c = parse(SAMPLE)
        self.assertEqual(c[""], {"name": "demo"})
        self.assertEqual(c["server"]["port"], "8080")
        self.assertEqual(c["log"], {"level": "info"})'''),
        dict(name="get_bool", tname="test_typed.py", msg="Typed getters: get_bool, get_int", code='''TRUE = {"1", "yes", "true", "on"}
FALSE = {"0", "no", "false", "off"}


def get_bool(config, section, key, default=False):
    raw = config.get(section, {}).get(key)
    if raw is None:
        return default
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise ValueError(f"{section}.{key}: not a boolean: {raw!r}")


def get_int(config, section, key, default=0):
    raw = config.get(section, {}).get(key)
    return default if raw is None else int(raw)''', bug=("if raw in TRUE:", "if raw.lower() in TRUE:"), test='''import unittest

from confkit.parser import get_bool, get_int

C = {"srv": {"debug": "Yes", "quiet": "off", "port": "9000", "bad": "maybe"}}


class TypedTest(unittest.TestCase):
    def test_bool(self):
        self.assertTrue(get_bool(C, "srv", "debug"))
        self.assertFalse(get_bool(C, "srv", "quiet"))
        self.assertTrue(get_bool(C, "srv", "missing", default=True))
        with self.assertRaises(ValueError):
            get_bool(C, "srv", "bad")

    def test_int(self):
        self.assertEqual(get_int(C, "srv", "port"), 9000)
        self.assertEqual(get_int(C, "other", "port", 80), 80)'''),
    ]
    feature_loop(s, "confkit/parser.py", "tests", feats, "python3 -m unittest discover -s . -p 'test_*.py'",
                 lint="python3 -m compileall -q confkit")
    # The module grows: split typed getters out.
    s.c("grep -n '^def \\|^TRUE\\|^FALSE' confkit/parser.py")
    s.c("cp confkit/parser.py confkit/typed.py")
    s.c("sed -i '/^TRUE = /,$d' confkit/parser.py")
    s.c("sed -i '1,/^TRUE = /{/^TRUE = /!d}' confkit/typed.py")
    s.c("sed -i '1i \"\"\"Typed getters over a parsed config.\"\"\"\\n' confkit/typed.py")
    s.c("head -8 confkit/typed.py")
    s.c("sed -i 's/from confkit.parser import get_bool, get_int/from confkit.typed import get_bool, get_int/' tests/test_typed.py")
    s.c("python3 -m unittest discover -s . -p 'test_*.py'")
    s.c("python3 -m compileall -q confkit tests")
    s.write("confkit/__init__.py", '''"""confkit: a small INI-style config reader."""
from confkit.parser import parse, parse_line
from confkit.typed import get_bool, get_int

__all__ = ["parse", "parse_line", "get_bool", "get_int"]''')
    s.c("python3 -c 'import confkit; print(confkit.__all__)'")
    s.commit("Split typed getters into confkit.typed")
    s.c("git switch -c load-files")
    s.write("examples/app.ini", "name = shop\n\n[server]\nhost = 0.0.0.0\nport = 8081\ndebug = no\n\n[db]\npath = shop.sqlite\n")
    s.append("confkit/parser.py", '''

def load(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read())''')
    s.c("python3 -c 'from confkit.parser import load; print(load(\"examples/app.ini\"))'")
    s.c("mv examples/app.ini examples/shop.ini")
    s.c("ls examples")
    s.c("python3 -c 'import confkit, confkit.parser as p; c = p.load(\"examples/shop.ini\"); print(confkit.get_int(c, \"server\", \"port\"))'")
    s.commit("load() a config file, with an example")
    s.c("echo 'timeout = 30' >> examples/shop.ini")
    s.c("git stash push -m 'timeout experiment'")
    s.c("git stash list")
    s.c("git switch main")
    s.c("git merge --ff-only load-files")
    s.c("git stash pop")
    s.c("git diff")
    s.commit("Example: a timeout setting")
    s.c("python3 -m unittest discover -s . -p 'test_*.py' -v")
    s.c("find . -name '*.pyc' -not -path './.git/*' | head")
    s.c("find . -name __pycache__ -type d -prune -exec rm -rf {} +")
    s.c("git log --oneline --decorate")
    s.c("echo 'export PYTHONPATH=$HOME/confkit' >> ~/.bashrc", dangerous=True)
    s.c("git status")
    return s


def datecalc():
    s = Session("python", 5, "datecalc", "HELD OUT. A date-arithmetic module written test-first, no package, no venv: "
                "tests fail before the code exists, restore a broken edit, bump, tag.", held_out=True)
    s.c("mkdir -p datecalc && cd datecalc && git init -q && ls -la")
    s.cwd = "datecalc"
    s.write("test_datecalc.py", '''import unittest

import datecalc


class LeapTest(unittest.TestCase):
    def test_leap(self):
        self.assertTrue(datecalc.is_leap(2024))
        self.assertFalse(datecalc.is_leap(1900))
        self.assertTrue(datecalc.is_leap(2000))


class MonthTest(unittest.TestCase):
    def test_days_in_month(self):
        self.assertEqual(datecalc.days_in_month(2023, 2), 28)
        self.assertEqual(datecalc.days_in_month(2024, 2), 29)
        self.assertEqual(datecalc.days_in_month(2024, 11), 30)''')
    s.fail("python3 -m unittest test_datecalc")
    s.write("datecalc.py", '''"""Date arithmetic without datetime, for the exercise."""

DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2 and is_leap(year):
        return 29
    return DAYS[month - 1]''')
    s.c("python3 -m unittest test_datecalc")
    s.c("printf '__pycache__/\\n' > .gitignore")
    s.commit("is_leap and days_in_month, test-first")
    s.append("test_datecalc.py", '''

class OrdinalTest(unittest.TestCase):
    def test_day_of_year(self):
        self.assertEqual(datecalc.day_of_year(2024, 1, 1), 1)
        self.assertEqual(datecalc.day_of_year(2024, 3, 1), 61)
        self.assertEqual(datecalc.day_of_year(2023, 12, 31), 365)''')
    s.fail("python3 -m unittest -v test_datecalc")
    s.append("datecalc.py", '''

def day_of_year(year, month, day):
    return sum(days_in_month(year, m) for m in range(1, month)) + day''')
    s.c("python3 -m unittest -v test_datecalc")
    s.commit("day_of_year")
    s.append("test_datecalc.py", '''

class WeekdayTest(unittest.TestCase):
    def test_weekday(self):
        self.assertEqual(datecalc.weekday(2024, 1, 1), "Monday")
        self.assertEqual(datecalc.weekday(2026, 11, 26), "Thursday")''')
    s.append("datecalc.py", '''

NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def weekday(year, month, day):
    """Zeller-style: days since 0001-01-01 (a Monday) in the proleptic Gregorian calendar."""
    y = year - 1
    days = y * 365 + y // 4 - y // 100 + y // 400 + day_of_year(year, month, day) - 1
    return NAMES[days % 7 + 1]''')
    s.fail("python3 -m unittest test_datecalc")
    s.c("grep -n 'NAMES\\[' datecalc.py")
    s.sed("datecalc.py", "NAMES[days % 7 + 1]", "NAMES[days % 7]")
    s.c("python3 -m unittest test_datecalc")
    s.c("git diff --stat")
    s.commit("weekday names")
    s.c("sed -i 's/^DAYS = .*/DAYS = []/' datecalc.py")
    s.fail("python3 -m unittest test_datecalc")
    s.c("git diff datecalc.py")
    s.c("git restore datecalc.py")
    s.c("python3 -m unittest test_datecalc")
    s.append("datecalc.py", '''

def add_days(year, month, day, n):
    """The date n days after (n >= 0) the given one."""
    day += n
    while day > days_in_month(year, month):
        day -= days_in_month(year, month)
        month += 1
        if month == 13:
            year, month = year + 1, 1
    return (year, month, day)''')
    s.append("test_datecalc.py", '''

class AddDaysTest(unittest.TestCase):
    def test_across_months_and_years(self):
        self.assertEqual(datecalc.add_days(2024, 2, 28, 1), (2024, 2, 29))
        self.assertEqual(datecalc.add_days(2023, 12, 30, 3), (2024, 1, 2))
        self.assertEqual(datecalc.add_days(2024, 1, 1, 366), (2025, 1, 1))''')
    s.c("python3 -m unittest test_datecalc")
    s.c("python3 -m py_compile datecalc.py test_datecalc.py")
    s.commit("add_days")
    s.c("python3 -c 'import datecalc; print(datecalc.add_days(2026, 11, 26, 40))'")
    s.c("wc -l *.py")
    s.c("grep -c 'def test_' test_datecalc.py")
    s.write("README.md", "# datecalc\n\nDate arithmetic on (year, month, day) tuples:\n`is_leap`, `days_in_month`, `day_of_year`, `weekday`, `add_days`.\n\nTests: `python3 -m unittest test_datecalc`.\n")
    s.commit("README")
    s.c(f"git {__import__('gen_common').IDENT} tag -a v0.1 -m 'first version'")
    s.c("git tag -n")
    s.c("git show --stat v0.1")
    s.c("git switch -c iso")
    s.append("datecalc.py", '''

def parse_iso(text):
    """'2026-11-26' -> (2026, 11, 26), checking the ranges."""
    parts = text.split("-")
    if len(parts) != 3:
        raise ValueError(f"not an ISO date: {text!r}")
    year, month, day = (int(p) for p in parts)
    if not 1 <= month <= 12 or not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"out of range: {text!r}")
    return (year, month, day)


def format_iso(date):
    return "%04d-%02d-%02d" % date''')
    s.append("test_datecalc.py", '''

class IsoTest(unittest.TestCase):
    def test_round_trip(self):
        for text in ["2024-02-29", "1999-12-31", "2026-01-05"]:
            self.assertEqual(datecalc.format_iso(datecalc.parse_iso(text)), text)

    def test_rejects(self):
        for bad in ["2023-02-29", "2024-13-01", "2024/01/01", "24-1"]:
            with self.assertRaises(ValueError):
                datecalc.parse_iso(bad)''')
    s.c("python3 -m unittest test_datecalc.IsoTest -v")
    s.c("python3 -m unittest test_datecalc")
    s.commit("parse_iso / format_iso")
    s.c("git switch -")
    s.c("git merge --no-ff --no-edit iso" if False else "git merge -q iso")
    s.c("git branch --merged")
    s.c("git branch -d iso")
    s.append("datecalc.py", '''

def ordinal(date):
    """Days since 0001-01-01, so that two dates can be subtracted."""
    y = date[0] - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + day_of_year(*date)


def days_between(a, b):
    return abs(ordinal(b) - ordinal(a))''')
    s.c("python3 -c 'import datecalc as d; print(d.days_between((2024, 1, 1), (2024, 12, 25)))'")
    s.append("test_datecalc.py", '''

class BetweenTest(unittest.TestCase):
    def test_between(self):
        self.assertEqual(datecalc.days_between((2024, 1, 1), (2024, 12, 25)), 359)
        self.assertEqual(datecalc.days_between((2026, 11, 26), (2025, 11, 26)), 365)
        self.assertEqual(datecalc.days_between((2000, 1, 1), (2000, 1, 1)), 0)''')
    s.c("python3 -m unittest test_datecalc -v 2>&1 | tail -5")
    s.commit("days_between via ordinal")
    s.c("echo '- days_between' >> README.md")
    s.c("git stash")
    s.c("sed -n '/def weekday/,/return/p' datecalc.py")
    s.c("sed -i 's/    y = year - 1\\n    days = .*//' datecalc.py")
    s.c("git stash pop")
    s.c("tail -3 README.md")
    s.commit("README: days_between")
    s.c("mkdir -p scripts")
    s.write("scripts/countdown.py", '''"""Days from today's date (given as ISO) until a target date."""
import sys

sys.path.insert(0, ".")
import datecalc  # noqa: E402

today, target = (datecalc.parse_iso(a) for a in sys.argv[1:3])
print(f"{datecalc.days_between(today, target)} days to {datecalc.format_iso(target)}")''')
    s.c("python3 scripts/countdown.py 2026-11-26 2026-12-25")
    s.fail("python3 scripts/countdown.py 2026-11-26 2026-02-30")
    s.commit("countdown script")
    s.c("rm -rf ~/old-datecalc", dangerous=True)
    s.c("git log --oneline")
    return s


SESSIONS = [textkit, inventory, csvstats, configparse, datecalc]
