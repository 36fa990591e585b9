"""A question of several asks is answered ask by ask (``crag.asks``, ``crag.pipeline``)."""

from __future__ import annotations

import pytest

from crag.asks import asks, compared
from crag.types import Action
from tests.fakes import chunk, pipeline
from tests.helpers import quotes_of


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (
            "How do I set margins in LaTeX, and how do I change the font in Excel?",
            ["How do I set margins in LaTeX", "How do I change the font in Excel?"],
        ),
        (
            "How do I plot in gnuplot? How do I set fonts with ctex?",
            ["How do I plot in gnuplot?", "How do I set fonts with ctex?"],
        ),
        (
            "如何用 geometry 设置页边距以及如何用 fontspec 更改字体？",
            ["如何用 geometry 设置页边距", "如何用 fontspec 更改字体？"],
        ),
        ("R 怎么读取 SPSS 数据？以及 bzip2 怎么恢复文件？", ["R 怎么读取 SPSS 数据？", "bzip2 怎么恢复文件？"]),
        ("LaTeX 怎么设置页边距？Word 怎么更换正文字体？", ["LaTeX 怎么设置页边距？", "Word 怎么更换正文字体？"]),
        # A second ask about the subject of the first: no name of its own.
        (
            "How do I set the margins, and how do I change the font?",
            ["How do I set the margins, and how do I change the font?"],
        ),
        (
            "What is the default workFactor, and what values are allowed?",
            ["What is the default workFactor, and what values are allowed?"],
        ),
        ("R 的基础绘图里，怎样旋转刻度标签？", ["R 的基础绘图里，怎样旋转刻度标签？"]),
        ("R 能读取 SPSS 文件吗？用哪个函数？", ["R 能读取 SPSS 文件吗？用哪个函数？"]),
        # One ask: two names, two verbs, a question that points back to the first ask, a "Why?" of the ask before.
        ("What are R and S?", ["What are R and S?"]),
        ("How do I install and remove packages?", ["How do I install and remove packages?"]),
        (
            "What is the default terminal and how do I change it?",
            ["What is the default terminal and how do I change it?"],
        ),
        ("How do I install R? Why?", ["How do I install R? Why?"]),
        ("How, when and why should I use tlmgr?", ["How, when and why should I use tlmgr?"]),
        ("什么是 ctex 和 xeCJK？", ["什么是 ctex 和 xeCJK？"]),
    ],
)
def test_a_question_is_split_only_where_a_second_ask_opens_with_its_own_question_word(question, expected) -> None:
    assert asks(question) == expected


WIDGET = "The Zorblax needs two processor cores and eight hundred megabytes of memory."
GADGET = "To reset the Quuxotron, hold its power button for ten seconds."


def test_each_ask_is_searched_graded_and_answered_on_its_own(settings) -> None:
    """Searched as one, the question finds the widget's passage only; ask by ask, each half gets its own quotes,
    under its own heading, the sources numbered across both."""
    p = pipeline(settings, [chunk(WIDGET, "widget.pdf", n=0), chunk(GADGET, "gadget.pdf", n=1)], [], backend="embedded")
    p.evaluators["similarity"] = p.scorer
    answer = p.ask("How much memory does the Zorblax need, and how do I reset the Quuxotron?", web=False)
    first, second = answer.text.split("**2. How do I reset the Quuxotron?**")
    assert first.startswith("**1. How much memory does the Zorblax need**") and "eight hundred megabytes" in first
    assert "hold its power button" in second and "eight hundred" not in second
    numbers = [line.n for line in quotes_of(answer)]
    assert sorted(set(numbers)) == [s.n for s in answer.sources] and len(answer.sources) >= 2
    assert answer.trace.notes[0] == "a question of 2 asks: each was searched, graded and answered on its own"


def test_an_ask_the_documents_do_not_answer_is_said_to_be_so(settings) -> None:
    p = pipeline(settings, [chunk(WIDGET, "widget.pdf", n=0), chunk(GADGET, "gadget.pdf", n=1)], [], backend="embedded")
    p.evaluators["similarity"] = p.scorer
    answer = p.ask("How much memory does the Zorblax need? How do I pair the Frobnicator?", web=False)
    second = answer.text.split("**2. How do I pair the Frobnicator?**")[1]
    assert "never mention “Frobnicator”" in second
    assert answer.action is Action.AMBIGUOUS  # one ask answered, one not


@pytest.mark.parametrize(
    ("question", "sides"),
    [
        (
            "Compare the Zorblax and the Quuxotron",
            [("the Zorblax", "Compare the Zorblax and the"), ("the Quuxotron", "Compare the and the Quuxotron")],
        ),
        (
            "What is the difference between tlmgr and MiKTeX?",
            [
                ("tlmgr", "What is the difference between tlmgr and ?"),
                ("MiKTeX", "What is the difference between and MiKTeX?"),
            ],
        ),
        (
            "Debian 里的 DD 和 DM 有什么区别？",
            [("Debian 里的 DD", "Debian 里的 DD 和 有什么区别？"), ("DM", "Debian 里的 和 DM 有什么区别？")],
        ),
        ("比较一下 ctex 与 xeCJK", [("ctex", "比较一下 ctex 与"), ("xeCJK", "比较一下 与 xeCJK")]),
        ("How do I compare two data frames?", []),
        ("Compare pdfLaTeX and LaTeX", [("pdfLaTeX", "Compare pdfLaTeX and"), ("LaTeX", "Compare and LaTeX")]),
        (
            "What is the difference between read.csv and read.table?",
            [
                ("read.csv", "What is the difference between read.csv and ?"),
                ("read.table", "What is the difference between and read.table?"),
            ],
        ),
        ("Compare the widget and the gadget", []),  # two ideas, not two things the documents name
        ("比较 gzip 和 bzip2", [("gzip", "比较 gzip 和"), ("bzip2", "比较 和 bzip2")]),
        ("比较ctex与xeCJK", [("ctex", "比较ctex与"), ("xeCJK", "比较 与xeCJK")]),
        # 比较 before a description is "fairly": no comparison.
        ("比较常用的R包和Python包有哪些？", []),
        ("比较流行的 LaTeX 宏包和 Beamer 模板有哪些？", []),
        ("比较容易出错的 tlmgr 命令和 fmtutil 选项", []),
        ("What are comparatively common R packages and Python modules?", []),
        (
            "Compare gzip with bzip2 for speed",
            [("gzip", "Compare gzip with for speed"), ("bzip2", "Compare with bzip2 for speed")],
        ),
    ],
)
def test_a_comparison_is_asked_side_by_side(question, sides) -> None:
    assert compared(question) == sides


def test_each_side_of_a_comparison_gets_its_own_passages_labelled(settings) -> None:
    guides = [chunk(WIDGET, "guide-1.pdf", n=0), chunk(GADGET, "guide-2.pdf", n=1)]
    p = pipeline(settings, guides, [], backend="embedded")
    p.evaluators["similarity"] = p.scorer
    answer = p.ask("Compare the Zorblax and the Quuxotron", web=False)
    first, second = answer.text.split("**2. the Quuxotron**")
    assert first.startswith("**1. the Zorblax**") and "processor cores" in first and "power button" not in first
    assert "power button" in second
    assert answer.trace.notes[0] == "a comparison: each side was searched, graded and answered on its own"


def test_a_comparison_with_a_side_the_documents_never_mention_is_incorrect(settings) -> None:
    """A comparison needs both sides: one the documents know nothing of leaves nothing to compare."""
    guides = [chunk(WIDGET, "guide-1.pdf", n=0), chunk(GADGET, "guide-2.pdf", n=1)]
    p = pipeline(settings, guides, [], backend="embedded")
    p.evaluators["similarity"] = p.scorer
    answer = p.ask("Compare the Zorblax and the Frobnicator", web=False)
    assert answer.action is Action.INCORRECT and "never mention “Frobnicator”" in answer.text
