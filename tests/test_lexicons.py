"""The rules built from the word lists in crag/lexicons, table by table: rows that must match and rows that must not,
in English and in Chinese. A word added to a list belongs in its table too."""

from __future__ import annotations

import re

import pytest

from crag import lexicons
from crag.asks import asks
from crag.evidence import aside
from crag.followups import elliptical, points_back, stands_alone
from crag.overview import FRONT_MATTER, INTRODUCTION, asks_about_documents, title_words

NEUTRAL = "How do I read a data file?"

# ---------------------------------------------------------------------------------------------
# The loader


def test_every_list_loads_with_entries_and_no_comment_or_blank_line() -> None:
    names = [p.stem for p in lexicons.resources.files(lexicons.__name__).iterdir() if p.name.endswith(".txt")]
    assert len(names) >= 15
    for name in names:
        found = lexicons.entries(name)
        assert found, name
        assert all(e == e.strip() and e and not e.startswith("#") for e in found), name
        assert len(set(found)) == len(found), f"{name} repeats an entry"
        assert lexicons.matching(name) in lexicons.MATCHES, f"{name} declares how its entries are matched"


def test_a_list_that_declares_no_matching_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexicons, "_text", lambda name: "# Words.\nlicence\n")
    lexicons.matching.cache_clear()
    try:
        with pytest.raises(ValueError, match="declares no '# match:' line"):
            lexicons.matching("undeclared")
    finally:
        lexicons.matching.cache_clear()


def test_a_list_is_read_once() -> None:
    assert lexicons.entries("licence") is lexicons.entries("licence")


@pytest.mark.parametrize(
    ("edges", "text", "matches"),
    [
        ("word", "the licence is", True),
        ("word", "sublicence", False),
        ("word", "licensee", False),
        ("start", "licensee", True),
        ("start", "sublicence", False),
        ("anywhere", "sublicence", True),
        ("word", "本文档采用许可证", True),  # Chinese runs on without spaces: matched anywhere
    ],
)
def test_alternation_edges(edges: lexicons.Match, text: str, matches: bool) -> None:
    pattern = lexicons.alternative(lexicons.entries("licence"), edges)
    assert bool(re.search(pattern, text, re.IGNORECASE)) is matches
    if edges == lexicons.matching("licence"):  # the list's own declaration
        assert bool(re.search(lexicons.alternation("licence"), text, re.IGNORECASE)) is matches


def test_an_entry_of_several_words_takes_any_whitespace() -> None:
    assert re.search(lexicons.alternation("licence"), "all  rights\nreserved", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# Asides left out of a quote: licence, contact, version lines


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("Copyright © 2019 The R Core Team.", "licence"),
        ("Copyright (C) 1999-2008 Julian Seward.", "licence"),
        ("This program is distributed WITHOUT ANY WARRANTY.", "licence"),
        ("Permission is granted to make and distribute verbatim copies of this manual.", "licence"),
        ("The fonts are licensed under the SIL Open Font License.", "licence"),
        ("All rights reserved.", "licence"),
        ("版权所有 © 2020 CTEX 社区。", "licence"),
        ("本文档采用知识共享许可协议发布。", "licence"),
        ("本软件按现状提供，详见免责声明。", "licence"),
        ("Use read.table to read a file into a data frame.", ""),
        ("The copyright holder is named on the title page of each volume of the series.", ""),
        ("使用 tlmgr 安装宏包。", ""),
        ("R 是一个用于统计计算的自由软件环境。", ""),
    ],
)
def test_licence_lines(sentence: str, kind: str) -> None:
    assert aside(sentence, NEUTRAL) == kind


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("E-mail: r-help@r-project.org", "contact"),
        ("Send bug reports to bug-bzip2@bzip.org.", "contact"),
        ("Tel: +1 555 0100", "contact"),
        ("Fax : +49 30 1234", "contact"),
        ("邮箱：ctex@ctex.org", "contact"),
        ("问题请发送至 tex-live@tug.org 邮件列表。", "contact"),
        ("Call email() to send the report.", ""),
        # An address at a domain kept for examples is an example to follow, not someone to contact.
        ('Add DEBEMAIL="your.email.address@example.org" to ~/.bashrc.', ""),
        ("在 ~/.bashrc 中设置 DEBEMAIL=you@example.com 即可。", ""),
        ("In R, x@y reads slot y of object x.", ""),
        ("Set the phone number field in the form to your own.", ""),
        ("请在命令行输入 tlmgr 命令。", ""),
    ],
)
def test_contact_lines(sentence: str, kind: str) -> None:
    assert aside(sentence, NEUTRAL) == kind


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("Version 1.0.8, 13 July 2019.", "version"),
        ("R version 4.2.2 (2022-10-31)", "version"),
        ("Revised v0.4", "version"),
        ("Release 2.1, May 3 2020.", "version"),
        ("2019年5月", "version"),
        ("最后更新：2023年3月1日", "version"),
        ("修订于 2021 年 3 月 5 日", "version"),
        ("Use version 4 or later.", ""),
        # What version is required, or what to do with it, is content, not a version stamp.
        ("Version 4 is required.", ""),
        ("You need R version 3.5.0.", ""),
        ("Requires version 2.0.", ""),
        ("Install version 2.1 first.", ""),
        ("Upgrade to release 3 before 2024-06.", ""),
        ("本宏包需要 2020 年以后的 TeX Live。", ""),
        ("请安装 2019 年的版本。", ""),
        ("R 版本 4.2 以后支持 UTF-8。", ""),
        ("版本 3.0 之后才有这个选项。", ""),
        ("LATEX 2020-02-02 以后的版本可以直接使用钩子。", ""),
        ("可以使用LATEX 2020/10/01 的钩子机制来统一设置。", ""),
        ("下边的例子基于老的版本0.9.12 。", ""),
        # A Chinese clause is one word to the eight-word limit: a stamp is short in Chinese characters too.
        ("Peter 在2015 年10 月去世，我们将持续工作以纪念他。", ""),
        ("第一版是在1996 年五月发行的。", ""),
        ("TEX Live 自2011 年起以年份作为发行版的版本号。", ""),
        ("R 4.0.0 and later releases read UTF-8 files.", ""),
        ("需要 2018 年或更高版本的 TeX Live。", ""),
        ("In version 2 the installer downloads the archive and then unpacks it into your home directory.", ""),
        ("Read the file with read.csv.", ""),
        ("宏包的用法见下一节。", ""),
    ],
)
def test_version_lines(sentence: str, kind: str) -> None:
    assert aside(sentence, NEUTRAL) == kind


# A question that asks for an aside keeps it in the quote: each row's sentence is an aside of that kind.
ASIDE_OF = {
    "licence": "Copyright © 2019 The R Core Team.",
    "contact": "E-mail: r-help@r-project.org",
    "version": "Version 1.0.8, 13 July 2019.",
}


@pytest.mark.parametrize(
    ("kind", "question", "asked"),
    [
        ("licence", "What licence is R released under?", True),
        ("licence", "Is it licensed under the GPL?", True),
        ("licence", "Can I distribute modified copies?", True),
        ("licence", "Is there any warranty?", True),
        ("licence", "R 的许可证是什么？", True),
        ("licence", "这个字体的版权归谁？", True),
        ("licence", "Can I use R for commercial purposes?", True),
        ("licence", "R 可以商用吗？", True),
        ("licence", "CTeX 是开源的吗？", True),
        ("licence", "How do I install R?", False),
        ("licence", "如何安装宏包？", False),
        ("contact", "How do I report a bug?", True),
        ("contact", "Who is the maintainer of bzip2?", True),
        ("contact", "What is the mailing list's address?", True),
        ("contact", "作者的邮箱是什么？", True),
        ("contact", "如何联系维护者？", True),
        ("contact", "How do I install R?", False),
        ("contact", "如何安装宏包？", False),
        ("version", "When was this manual released?", True),
        ("version", "Which version of R does it describe?", True),
        ("version", "What is new in 4.0?", True),
        ("version", "这个手册是哪一年发布的？", True),
        ("version", "最新版本是多少？", True),
        ("version", "When did R 4.0 come out?", True),
        ("version", "When was it last updated?", True),
        ("version", "这份文档的更新日期是？", True),
        ("version", "How do I install R?", False),
        # A word that holds an asked-for word inside it asks for nothing of it, nor does "when" of an event.
        ("version", "How do I update all packages?", False),
        ("version", "How do I validate the input?", False),
        ("version", "What happens when R runs out of memory?", False),
        ("version", "如何更新所有宏包？", False),
        ("contact", "How do I debug R code?", False),
        ("licence", "Can I redistribute R?", True),
        ("version", "如何安装宏包？", False),
    ],
)
def test_a_question_asks_for_an_aside(kind: str, question: str, asked: bool) -> None:
    assert (aside(ASIDE_OF[kind], question) == "") is asked


# ---------------------------------------------------------------------------------------------
# Questions: asks, follow-ups, whole documents


@pytest.mark.parametrize(
    ("question", "count"),
    [
        ("How do I set margins in LaTeX, and how do I change the font in Excel?", 2),
        ("How do I plot in gnuplot? How do I set fonts with ctex?", 2),
        ("如何用 geometry 设置页边距以及如何用 fontspec 更改字体？", 2),
        ("What are R and S?", 1),
        ("How do I install and remove packages?", 1),
        ("如何安装 R？", 1),
    ],
)
def test_a_question_is_split_where_an_ask_opens_with_a_question_word(question: str, count: int) -> None:
    assert len(asks(question)) == count


@pytest.mark.parametrize(
    ("question", "goes_on"),
    [
        ("And on Windows?", True),
        ("What about macOS?", True),
        ("how about the fonts?", True),
        ("Or should I use gzip?", True),
        ("那行距呢？", True),
        ("还有别的办法吗？", True),
        ("Andrew's package, how do I install it?", False),
        ("How do I install R?", False),
        ("Sorting a data frame by two columns?", False),
        ("如何安装 R？", False),
    ],
)
def test_a_follow_up_opens_as_one(question: str, goes_on: bool) -> None:
    assert elliptical(question) is goes_on


@pytest.mark.parametrize(
    ("question", "back"),
    [
        ("Does it run on Windows?", True),
        ("How do I undo that?", True),
        ("Can I install them offline?", True),
        ("What is its default value?", True),
        ("它支持中文吗？", True),
        ("那个命令怎么用？", True),
        ("Is it possible to read Excel files?", False),
        ("How long does it take to build R?", False),
        # "it" before how a thing is judged points at nothing said before, whichever judgement it is.
        ("Is it normal that R uses so much memory?", False),
        ("Is it hard to learn LaTeX?", False),
        ("Is it allowed to mix pdfTeX and XeTeX files?", False),
        ("Is it worth it?", True),
        ("Which command lists the files that changed?", False),
        ("How do I install R?", False),
        ("如何安装 R？", False),
    ],
)
def test_a_question_points_back(question: str, back: bool) -> None:
    assert points_back(question) is back


@pytest.mark.parametrize(
    ("question", "alone"),
    [
        ("What is gnuplot?", True),
        ("How do I install R from source?", True),
        ("如何在 LaTeX 中插入表格？", True),
        ("Windows?", False),
        ("On a Mac?", False),
        ("Tell me more", False),
        ("Can you explain?", False),
        ("怎么卸载？", False),
        ("具体怎么做？", False),
    ],
)
def test_a_question_stands_alone(question: str, alone: bool) -> None:
    assert stands_alone(question) is alone


@pytest.mark.parametrize(
    ("question", "whole"),
    [
        ("What is this document about?", True),
        ("Summarize the manual", True),
        ("Give me an overview of these files", True),
        ("这份文档主要讲了什么？", True),
        ("概述一下这本手册", True),
        ("这个 PDF 的主要内容", True),
        ("What is the outline of a text box?", False),
        ("How do I insert a table?", False),
        ("如何插入表格？", False),
        # Asking how to make a table of contents or an outline is asking how it is done, not what the documents hold;
        # asking for one (however politely) is asking what they hold.
        ("How do I add a table of contents?", False),
        ("How do I draw an outline?", False),
        ("Can I generate a table of contents automatically?", False),
        ("How do I add a table of contents for this document?", False),
        ("Is there a way to create a summary of my thesis?", False),
        ("如何添加目录？", False),
        ("怎么生成这份文档的目录？", False),
        ("怎样画大纲？", False),
        ("Give me an outline", True),
        ("Table of contents?", True),
        ("Write a summary of this manual", True),
        ("Can you write a summary of these files?", True),
        ("How can I get an overview of this document?", True),
        ("这份文档的目录", True),
        ("总结一下这份文档", True),
    ],
)
def test_a_question_about_whole_documents(question: str, whole: bool) -> None:
    assert asks_about_documents(question) is whole


@pytest.mark.parametrize(
    ("title", "named"),
    [
        ("An Introduction to R", ["R"]),
        ("The gnuplot 5.4 Manual", ["gnuplot"]),
        ("Notes on the Version of LaTeX", ["LaTeX"]),
    ],
)
def test_a_title_names_what_is_not_a_stop_word(title: str, named: list[str]) -> None:
    assert [w for w in title_words(title) if w.isascii()] == named


@pytest.mark.parametrize(
    ("sentence", "front"),
    [
        ("Copyright 1999 the authors.", True),
        ("Permission is granted to copy this manual.", True),
        ("TeX is a trademark of the American Mathematical Society.", True),
        ("Send comments to ctex@example.org.", True),
        ("本文档的版权归作者所有。", True),
        ("R is a language and environment for statistical computing.", False),
        ("本文档介绍 CTeX 宏集的用法。", False),
    ],
)
def test_front_matter_says_nothing_of_what_a_document_is(sentence: str, front: bool) -> None:
    assert bool(FRONT_MATTER.search(sentence)) is front


@pytest.mark.parametrize(
    ("heading", "introduces"),
    [
        ("1 Introduction", True),
        ("Preface", True),
        ("About this manual", True),
        ("前言", True),
        ("第一章 简介", True),
        ("3 Data frames", False),
        ("第三章 表格", False),
    ],
)
def test_an_introduction_heading(heading: str, introduces: bool) -> None:
    assert bool(INTRODUCTION.search(heading)) is introduces
