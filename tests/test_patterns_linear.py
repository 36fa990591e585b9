"""Every regular expression of crag and ui takes time linear in the text it runs over, on text written to make it
backtrack.

One pattern, ``(?:\\W*\\w+){1,8}\\W*$``, split a long run of letters (a Chinese clause is one) into words in more ways
than could be tried: an offline answer over an ordinary Chinese sentence took minutes. A pattern that only scans to
the end of the text from each place it starts (``“[^”]*”`` over a run of opening quotes) finishes, but takes four
times as long for twice the text: on a long enough text it blocks an answer too.

The patterns are collected three ways: those a module holds (also inside tuples, lists, dicts, dataclass instances
and classes); those a function builds from a literal (read from the source); and those a function builds from data
(a file's name, a term, a word list), recorded while ``exercise`` calls those functions. Every place in a function
that builds a pattern from data must be reached by ``exercise``: a new one that is not fails the test, which names it.

Each pattern runs in a child process over long adversarial texts with ``search``, ``fullmatch`` and ``finditer``
(``match`` does the first step of ``search``'s work; ``sub``, ``split`` and ``findall`` do ``finditer``'s), at
20,000 characters and at 40,000. A hang is a failure (the limit is generous and is no speed assertion); so is a
pattern whose process CPU time on the longer text is more than ``GROWTH`` times that on the shorter, the least of a
few runs each, so that a busy machine does not make a linear pattern look quadratic.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
import resource
import signal
import statistics
import string
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# CPU seconds for every pattern over every text, twice over: linear rules take about twenty. CPU time, so that a
# busy machine does not make a linear rule look hung; the wall-clock limit (under pytest's) only catches the rest.
HANG = 120
WALL = 540
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("crag", "ui")
# crag.bench runs on demand with its own heavy imports; a __main__ runs a command when imported.
SKIPPED = ("crag.bench",)

SIZE = 20_000  # characters of each adversarial text; the growth check doubles it
GROWTH = 2.5  # a linear pattern takes about twice as long on twice the text; a quadratic one four times
FLOOR = 0.0005  # CPU seconds on the shorter text under which growth is not judged: too short to time well
RUNS = 7  # pairs of runs of a pattern whose growth looks too steep at first, the median of them taken
METHODS = ("search", "fullmatch", "finditer")

ISSUE_ZH = (
    "本软件包管理器自2023年起支持在所有主流操作系统上自动安装和更新依赖项以及配置文件，"
    "包括Linux、macOS、Windows、FreeBSD、OpenBSD、Solaris、AIX和HP-UX等平台。"
)
NAME = "abcdefghijklmnopqrstuvwxyz" * 2 + "abcdefgh"  # 60 letters
ISSUE_EN = (
    f"Since version 2 the installer downloads https://example.org/packages/{NAME}/archive.tar.gz and then unpacks it."
)
# A Chinese clause of 200 characters with a date and a version in it, then a list of a dozen names.
CLAUSE = ("软件包管理器自2023年3月起第2版在所有系统上自动安装依赖项" * 8)[:200] + "，包括" + "、".join(["Linux"] * 12)


def _repeated(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def adversarial(n: int = SIZE) -> dict[str, str]:
    """Texts of ``n`` characters that make a backtracking pattern retry: long runs of one class of characters, and
    runs of two classes that alternate; and the issue's two sentences."""
    units = {
        "letters": "a",
        "digits": "1",
        "chinese sentence, repeated": ISSUE_ZH,
        "chinese clause with dates and numbers": CLAUSE,
        "spaces": " ",
        "punctuation": string.punctuation,
        "chinese punctuation": "，。？“”、：",
        "words": "a ",
        "hyphens": "-",
        "dotted": "a.",
        "dots": ".",  # a form's blank, a contents page's leaders
        "spaced dots": ". ",
        "dotted digits": "1.",
        "name characters": "a-b_c.d/",
        "camel case": "Ab",
        "at signs": "a@",
        "lines": "a\n",
        "questions and quotes": "a? “",
        "tags": "<source",
        "pipes and rules": "| - ",
        "brackets": "[",
        "backslashes": "\\",
    }
    texts = {label: _repeated(unit, n) for label, unit in units.items()}
    texts["an address without an end"] = "https://" + "a" * (n - 8)
    texts["the issue's sentences"] = _repeated(f"{ISSUE_ZH} {ISSUE_EN} ", n)
    return texts


# ---------------------------------------------------------------------------------------------
# Patterns a module holds


def module_names() -> Iterator[str]:
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.startswith(SKIPPED) and not info.name.endswith("__main__"):
                yield info.name


def patterns_in(value: object, where: str, seen: set[int], depth: int = 0) -> Iterator[tuple[str, re.Pattern[str]]]:
    if id(value) in seen or depth > 5:
        return
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        yield where, value
    elif isinstance(value, tuple | list | set | frozenset):
        for i, item in enumerate(value):
            yield from patterns_in(item, f"{where}[{i}]", seen, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from patterns_in(item, f"{where}[{key!r}]", seen, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from patterns_in(getattr(value, field.name, None), f"{where}.{field.name}", seen, depth + 1)


Found = dict[tuple[str, int], str]  # (pattern, flags) -> where it was found


def collect() -> Found:
    """Every distinct compiled pattern a module of crag or ui holds at its top level, by where it was found."""
    found: Found = {}
    for name in module_names():
        module = importlib.import_module(name)
        seen: set[int] = set()
        for attr, value in vars(module).items():
            if isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type) and value.__module__ == name:  # a class's own attributes
                items = [(f"{name}.{attr}.{key}", item) for key, item in vars(value).items()]
            else:
                items = [(f"{name}.{attr}", value)]
            for where, item in items:
                for place, pattern in patterns_in(item, where, seen):
                    if isinstance(pattern.pattern, str):
                        found.setdefault((pattern.pattern, pattern.flags), place)
    return found


# ---------------------------------------------------------------------------------------------
# Patterns a function builds


RE_FUNCTIONS = ("compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer")


@dataclasses.dataclass(frozen=True)
class Site:
    """A call of ``re.compile``, ``re.search``… inside a function: the pattern it builds, when that is a literal."""

    path: str  # relative to the checkout
    line: int
    function: str
    pattern: str | None = None
    flags: int = 0

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.function})"


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
    return None


def _flags(call: ast.Call, function: str) -> int | None:
    """The flags of a call as written (``re.IGNORECASE | re.M``), or None when they are no constant."""
    at = {"compile": 1, "sub": 4, "subn": 4, "split": 3}.get(function, 2)
    node = next((k.value for k in call.keywords if k.arg == "flags"), call.args[at] if len(call.args) > at else None)
    if node is None:
        return 0
    try:
        return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re}))  # noqa: S307 (our own source)
    except (NameError, AttributeError, TypeError):  # a name of the module's: built from data
        return None


def call_sites() -> list[Site]:
    """Every place inside a function of crag or ui that builds a pattern with ``re``, read from the source."""
    sites: list[Site] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            module = relative.removesuffix(".py").replace("/", ".")
            if module.startswith(SKIPPED) or module.endswith("__main__"):
                continue
            sites += _sites_in(ast.parse(path.read_text(encoding="utf-8")), relative)
    return sites


def _sites_in(tree: ast.AST, relative: str) -> list[Site]:
    sites: list[Site] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            function = getattr(node, "name", "<lambda>")
        call = node if isinstance(node, ast.Call) else None
        if (
            function
            and call is not None
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "re"
            and call.func.attr in RE_FUNCTIONS
        ):
            pattern = _literal(call.args[0] if call.args else None)
            flags = _flags(call, call.func.attr)
            if pattern is None or flags is None:
                sites.append(Site(relative, call.lineno, function))
            else:
                sites.append(Site(relative, call.lineno, function, pattern, flags))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return sites


@contextmanager
def recording(found: dict[tuple[str, int], str]) -> Iterator[None]:
    """While inside, each pattern that crag or ui hands to ``re`` is added to ``found``, by the place (path:line)
    that built it."""
    originals = {name: getattr(re, name) for name in RE_FUNCTIONS}

    def hooked(name: str, original: Callable[..., object]) -> Callable[..., object]:
        signature = inspect.signature(original)

        def call(*args: object, **kwargs: object) -> object:
            caller = sys._getframe(1)
            path = Path(caller.f_code.co_filename)
            if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in PACKAGES:
                bound = signature.bind(*args, **kwargs).arguments
                pattern, flags = bound["pattern"], int(bound.get("flags", 0))
                if isinstance(pattern, re.Pattern):
                    pattern, flags = pattern.pattern, pattern.flags
                if isinstance(pattern, str):
                    compiled = originals["compile"](pattern, flags)
                    where = f"{path.relative_to(ROOT).as_posix()}:{caller.f_lineno}"
                    found.setdefault((compiled.pattern, compiled.flags), where)
            return original(*args, **kwargs)

        return call

    for name, original in originals.items():
        setattr(re, name, hooked(name, original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(re, name, original)


def exercise() -> None:
    """Calls each function that builds a pattern from data, with data like a user's: a question that names a file,
    a document's opening, an answer with a number, a term in each of its kinds."""
    from crag.asks import asks, compared
    from crag.overview import asks_about_documents, names_a_document, overview, without_names
    from crag.support import Grounder, unsupported
    from crag.terms import Term, Vocabulary, aliases, mentions, specific_terms
    from crag.text import han_named
    from crag.types import Chunk, FileResult, Source

    files = ["R-intro.pdf", "r data/R-data.pdf"]
    asks_about_documents("What is R-intro.pdf about?", files)
    names_a_document("Summarize this manual", files)
    without_names("What does R intro say about r data and R-intro.pdf?", files)
    opening = "An Introduction to R. R is an integrated suite of software facilities for data manipulation and display."
    overview(
        "R-intro.pdf",
        [Chunk(id="c", text=opening, file="R-intro.pdf", pages=(1,))],
        FileResult(file="R-intro.pdf", status="indexed"),
    )
    asks("How do I set the margins in LaTeX, and how do I change the font in gnuplot?")
    compared("Compare bzip2 and gzip")
    compared("Debian里的DD和DM有什么区别")
    unsupported("Set the size to 1,200 pixels with -dPDFA [1].", ["Use -dPDFA for PDF/A; 1200 is the limit."])
    source = Source(
        n=1, kind="local", file="a.pdf", pages=(1,), text="Install it with apt-get, version 4.2.", chunk_ids=("c",)
    )
    grounder = Grounder([source], [source.text], "How do I install it?")
    grounder.feed("Install it with apt-get [1]. ```\napt-get install r-base\n``` Version 4.2 works.")
    grounder.close()
    where = Vocabulary(["Windows 2000 and R, and the Journal of Chemical Physics (JCP): 设置页眉和页脚的方法。"])
    for term in [Term("Win2000", "identifier", True), Term("R", "identifier", True), Term("页眉页脚", "han", True)]:
        mentions(term, where)
    question = "How do I cite the Journal of Chemical Physics?"
    aliases(question, specific_terms(question), where)
    han_named("行间距", "调整行距的方法")


# ---------------------------------------------------------------------------------------------
# The probe, in a child process


def _run(pattern: re.Pattern[str], method: str, text: str) -> float:
    """CPU time of one run, in this thread: unlike wall time or process time, it counts no time that other
    processes, or threads of this one, take."""
    start = time.thread_time()
    if method == "finditer":
        collections.deque(pattern.finditer(text), maxlen=0)
    else:
        getattr(pattern, method)(text)
    return time.thread_time() - start


def growth(pattern: re.Pattern[str], method: str, short: str, long: str, runs: int = RUNS) -> float:
    """How many times longer ``method`` takes over ``long`` than over ``short`` (twice as long): the median, over
    ``runs`` pairs of runs, of one run over ``long`` against the run over ``short`` just before it. Taken in pairs,
    both texts meet the same machine: the other test process sharing the cores slows both or neither. 0 when it
    takes too little time over ``short`` to judge."""
    pairs = [(_run(pattern, method, short), _run(pattern, method, long)) for _ in range(runs)]
    if min(quick for quick, _ in pairs) < FLOOR:
        return 0.0
    return statistics.median(slow / max(quick, 1e-9) for quick, slow in pairs)


def too_steep(pattern: re.Pattern[str], method: str, short: str, long: str) -> float:
    """The growth of a pattern over a text when it is more than ``GROWTH``, else 0: once at first, and again over
    ``RUNS`` pairs of runs when once looks too steep (a linear pattern's one run may have been slowed)."""
    once = growth(pattern, method, short, long, runs=1)
    if once <= GROWTH:
        return 0.0
    again = growth(pattern, method, short, long)
    return again if again > GROWTH else 0.0


def probe() -> None:
    """Run in the child: each pattern is named before it runs, so the one that hangs is the last line printed. Then
    one line of JSON: how many patterns, the places that build one from data that ``exercise`` did not reach, and
    the patterns whose time grows faster than their text."""
    built: dict[tuple[str, int], str] = {}
    with recording(built):
        found = collect()
        exercise()
    sites = call_sites()
    for site in sites:
        if site.pattern is not None:
            found.setdefault((site.pattern, site.flags), site.where)
    reached = set(built.values())
    for key, where in built.items():
        found.setdefault(key, where)
    unreached = [s.where for s in sites if s.pattern is None and f"{s.path}:{s.line}" not in reached]
    short, long = adversarial(SIZE), adversarial(2 * SIZE)
    steep = []
    for (source, flags), where in found.items():
        pattern = re.compile(source, flags)
        for label in short:
            for method in METHODS:
                print(f"{where} over {label} ({method})", flush=True)
                if ratio := too_steep(pattern, method, short[label], long[label]):
                    steep.append(f"{where}, {method} over {label}: {ratio:.1f} times the time for twice the text")
    in_functions = sorted({*reached, *(s.where for s in sites if s.pattern is not None)})
    report = {"patterns": len(found), "in functions": in_functions, "unreached": unreached, "steep": steep}
    print(json.dumps(report), flush=True)


def _limit_cpu() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (HANG, HANG + 5))  # past it, the child gets SIGXCPU


@pytest.fixture(scope="module")
def probed() -> dict:
    try:
        run = subprocess.run(
            [sys.executable, "-c", "from tests.test_patterns_linear import probe; probe()"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WALL,
            preexec_fn=_limit_cpu,  # noqa: PLW1509 (the child runs no threads yet)
        )
        out = run.stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        run = None
    if run is None or run.returncode == -signal.SIGXCPU:
        last = out.strip().splitlines()[-1:] or ["(before the first pattern)"]
        raise AssertionError(f"a pattern did not finish in {HANG} s of CPU or {WALL} s: {last[0]}")
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_every_pattern_takes_time_linear_in_its_text(probed: dict) -> None:
    assert probed["patterns"] > 150, "the walk found too few patterns: a module failed to import or moved its patterns"
    assert not probed["steep"], "\n".join(probed["steep"])


def test_every_pattern_a_function_builds_from_data_is_tried(probed: dict) -> None:
    """A place that builds a pattern from data must be reached by ``exercise``, or its pattern would never run."""
    assert not probed["unreached"], f"add a call that reaches these to exercise(): {probed['unreached']}"
    inside = " ".join(probed["in functions"])
    for built in ("crag/overview.py", "crag/support.py", "crag/asks.py", "crag/terms.py"):
        assert built in inside


def test_the_growth_check_fails_a_quadratic_pattern() -> None:
    """A pattern that scans to the end of the text from each place it starts fails the check; the same pattern
    made to stop where the next start is passes it."""
    short, long = adversarial(SIZE)["questions and quotes"], adversarial(2 * SIZE)["questions and quotes"]
    assert too_steep(re.compile(r"“[^”]*”"), "search", short, long) > GROWTH
    assert too_steep(re.compile(r"\w+\("), "finditer", "a" * 5000, "a" * 10_000) > GROWTH
    assert not too_steep(re.compile(r"“[^“”]*+”"), "search", short, long)


def test_function_built_patterns_are_recorded_where_they_are_built() -> None:
    """The hook names the line of crag that built a pattern, and leaves what ``re`` returns unchanged."""
    from crag.support import unsupported

    built: dict[tuple[str, int], str] = {}
    with recording(built):
        assert unsupported("It holds 1,200 pages.", ["It holds 1200 pages."]) == ()
    assert any(where.startswith("crag/support.py:") for where in built.values())
    assert re.search("a", "a") is not None and re.search.__module__ == "re"


def test_the_walk_finds_patterns_inside_data_and_the_rules_of_each_package() -> None:
    """The walk reaches patterns held in a tuple of dataclasses (the asides) and in every package's text rules."""
    found = set(collect().values())
    assert {"crag.evidence.ASIDES[2].found", "crag.legacy.LINE", "crag.terms._NAME_RUN", "ui.text.HOST"} <= found
    assert any(where.startswith("crag.injection.") for where in found)


def test_the_walk_finds_the_patterns_built_from_word_lists() -> None:
    """Patterns built from crag/lexicons when their module is imported are module-level patterns like the others."""
    found = set(collect().values())
    assert {
        "crag.asks._SPLIT",
        "crag.followups._ELLIPTICAL",
        "crag.overview._ABOUT_EN",
        "crag.evidence.ASIDES[0].found",
    } <= found


def test_the_source_is_read_for_patterns_built_inside_functions() -> None:
    """A literal pattern in a function is read from the source with its flags; one built from data is marked for
    ``exercise`` to reach."""
    tree = ast.parse(
        "import re\n"
        "def f(name):\n"
        "    re.sub(r'x+', '', name, flags=re.I)\n"
        "    return re.search(rf'{name}y', name)\n"
        "re.compile('module level')\n"
    )
    assert _sites_in(tree, "m.py") == [Site("m.py", 3, "f", "x+", re.IGNORECASE), Site("m.py", 4, "f")]
