"""The question's specific terms, and whether a text mentions one in any form: a user's words are not the document's."""

from __future__ import annotations

import pytest

from crag.analysis import Analysis
from crag.terms import specific_terms
from tests.fakes import FakeStats

GHOSTSCRIPT = (
    "Ghostscript converts PostScript to PDF with the pdfwrite device: gs -sDEVICE=pdfwrite -o out.pdf in.ps. "
    "Use -dPDFSETTINGS=/printer for print quality and -dCompatibilityLevel=1.4 to choose the PDF version."
)
CTEX = "ctex 宏包设置中文字体时，使用 \\setCJKmainfont 命令指定正文字体，例如宋体或楷体。"


def test_specific_terms_are_names_identifiers_and_rare_words() -> None:
    terms = {
        t.text: t.strong for t in specific_terms("How do I make Ghostscript produce a PDF/A file from read.csv output?")
    }
    assert terms == {"Ghostscript": True, "PDF/A": True, "read.csv": True}
    rare = {t.text: t.strong for t in specific_terms("Which function undoes stack() in long data?")}
    assert rare == {"undoes": False}, "a rare everyday word is specific, not a name"
    assert specific_terms("How do I explain the way it works, please?") == []
    assert [t.text for t in specific_terms("用 xeCJK 宏包时怎么设置中文正文字体？")] == ["xeCJK"]
    assert "14" not in [t.text for t in specific_terms("Can I read a file saved by Stata 14?")], (
        "a bare number is not a name"
    )


def test_a_name_the_documents_never_mention_is_a_near_miss() -> None:
    stats = FakeStats([GHOSTSCRIPT, "Another page about fonts."])
    check = Analysis("How do I make Ghostscript produce a PDF/A file?", stats).near_miss([GHOSTSCRIPT])
    assert check.missing == ("PDF/A",) and check.unknown == ("PDF/A",)
    assert Analysis("How do I make Ghostscript produce a PDF file?", stats).near_miss([GHOSTSCRIPT]).missing == ()


def test_a_chinese_near_miss_is_caught_too() -> None:
    stats = FakeStats([CTEX])
    check = Analysis("用 xeCJK 宏包时怎么设置中文正文字体？", stats).near_miss([CTEX])
    assert check.unknown == ("xeCJK",)
    assert Analysis("用 ctex 宏包怎么设置中文正文字体？", stats).near_miss([CTEX]).unknown == ()


def test_a_name_run_into_chinese_text_or_typeset_apart_from_its_number_is_still_mentioned() -> None:
    """Chinese text often runs a name into its characters ("执行sudo visudo将"), and typesetting sets LaTeX2e as
    "LATEX 2ε". Both were read as never mentioned, and such a question came out Incorrect ("the documents never
    mention 'LaTeX2e'") though the passage answers it. A name that is really absent still is."""
    guide = (
        "首次升级前，在终端中执行sudo visudo将安装路径添加在secure_path中。"
        "目前 LATEX 2ε的版本低于宏包的要求时，运行fmtutil-user。"
    )
    stats = FakeStats([guide])
    for question in ("Ubuntu 下用 sudo tlmgr 之前要先用 visudo 做什么？", "提示 LaTeX2e 版本太低怎么办？"):
        check = Analysis(question, stats).near_miss([guide])
        assert "visudo" not in check.missing and "LaTeX2e" not in check.missing
    assert Analysis("用 sudoedit 改 secure_path 可以吗？", stats).near_miss([guide]).unknown == ("sudoedit",)
    assert Analysis("提示 LaTeX3 版本太低怎么办？", stats).near_miss([guide]).unknown == ("LaTeX3",)


def test_a_capital_letter_alone_is_a_name_only_as_written() -> None:
    """ "R 里怎么按两列排序？" found "R" in a CTeX table's column letters ("l l l r"), so the passage searched for
    again was that table, not one of R's manuals."""
    table = r"\begin{tabular*}{5cm}{@{\extracolsep{\fill}} l l l r} 1 & 2 & 3 & 4 \end{tabular*}"
    manual = "In R, order() sorts by several columns: DF[order(DF$a, DF$b), ]."
    stats = FakeStats([table, manual])
    question = "R 里怎么按两列对数据框的行进行排序？"
    assert Analysis(question, stats).near_miss([table]).missing == ("R",)
    assert Analysis(question, stats).near_miss([manual]).missing == ()
    assert Analysis(question, stats).near_miss(["用R读取数据"]).missing == ()
    assert Analysis(question).mentioned_by("R")("See the R-devel list.")
    assert not Analysis(question).mentioned_by("R")("x <- r + 1")


def test_a_rare_word_is_mentioned_in_any_inflection_or_split_in_two() -> None:
    """ "recompiling" is rare enough to count as a name, and R-admin writes "re-compiled": the question came out
    Incorrect ("your documents never mention 'recompiling'") though the manual answers it. Another inflection,
    a hyphen or a space between its parts is the same word; a word the documents really lack is still missing."""
    manual = "An existing R installation can use OpenBLAS, re-compiled or not, by replacing libRblas.so."
    stats = FakeStats([manual])
    for question in ("Can R use OpenBLAS without recompiling?", "Is OpenBLAS used without recompiles?"):
        assert Analysis(question, stats).near_miss([manual]).missing == ()
    for question, text in (
        ("Must I recompile R for OpenBLAS?", "R need not be recompiling for OpenBLAS."),
        ("Which subdirectories hold OpenBLAS?", "Each subdirectory of the tree holds one OpenBLAS build."),
        ("Is a tarball-based install of OpenBLAS possible?", "A tarball-based install of OpenBLAS is possible."),
    ):
        assert Analysis(question, FakeStats([text])).near_miss([text]).missing == (), question
    check = Analysis("Can R use OpenBLAS without recompiling?", FakeStats(["Use OpenBLAS.", manual])).near_miss(
        ["Use OpenBLAS."]
    )
    assert check.missing == ("recompiling",) and check.unknown == (), "written in two in another passage"
    check = Analysis("Can R use multithreaded OpenBLAS without recompiling?", FakeStats([manual])).near_miss([manual])
    assert check.missing == ("multithreaded",)
    tarball = ["Unpack the tarballs as root and install them."]
    check = Analysis("Why do tarball files fail when installing as root?", FakeStats(tarball)).near_miss(tarball)
    assert check.terms == ("tarball",) and check.missing == ()
    renv = ["Site settings go in the file R_HOME/etc/Renviron.site."]
    assert Analysis("How do I lock versions with renv?", FakeStats(renv)).near_miss(renv).unknown == ("renv",), (
        "a word is not the start of another"
    )
    check = Analysis("Does R bake sourdough without recompiling?", FakeStats(["Bread."])).near_miss(["Bread is baked."])
    assert check.missing == ("sourdough", "recompiling") and check.unknown == ("recompiling",)


def test_a_rare_chinese_word_elsewhere_in_the_documents_is_not_unknown() -> None:
    """A rare Chinese word (a name) that no retrieved passage holds, but another passage of the index does, is
    missing: the answer is no better than Ambiguous. But the documents mention it, so it is not unknown (that
    made the question Incorrect and the message say "never mention")."""
    elsewhere = "附录：节日里的糍粑和年糕的排版示例。"
    check = Analysis("怎么排版糍粑？", FakeStats([CTEX, elsewhere])).near_miss([CTEX])
    assert check.missing == ("糍粑",) and check.unknown == ()
    assert Analysis("怎么排版糍粑？", FakeStats([CTEX])).near_miss([CTEX]).unknown == ("糍粑",)


def test_a_plain_word_is_not_expected_across_languages() -> None:
    """A Chinese passage answering an English question does not repeat its English words; names it does."""
    check = Analysis("How do I set the main Chinese font with setCJKmainfont?", FakeStats([CTEX])).near_miss([CTEX])
    assert check.missing == ()


# ---------------------------------------------------------------------------------------------
# A user's words: each kind of wording gap, in English and Chinese. A question whose term the documents hold in
# another form is not a near miss: "the documents never mention X" would be false.


@pytest.mark.parametrize(
    ("question", "term", "document"),
    [
        # a derived or inflected form, by its stem, and a name's derived form
        ("Is decompressing slower with a bigger block?", "decompressing", "Decompression reads blocks of 900k."),
        ("Does R do multithreading?", "multithreading", "R code is single-threaded, but BLAS can be multithreaded."),
        ("Which Norwegian mirror should I use?", "Norwegian", "The mirror in Norway is ftp.no.debian.org."),
        ("用 Norwegian 镜像可以吗？", "Norwegian", "The mirror in Norway is ftp.no.debian.org."),
        # a number or a size written another way
        ("How do I draw a 3x3 grid?", "3x3", "Draw a grid of 3 by 3 squares with the grid command."),
        ("How do I draw a 3x3 grid?", "3x3", "Draw a 3 × 3 grid with the grid command."),
        ("怎么画 3x3 的网格？", "3x3", "用 grid 命令画 3×3 的网格。"),
        ("Does it accept a 10-digit serial?", "10-digit", "The serial is a ten-digit number."),
        ("Is 900kB the largest block?", "900kB", "The largest block is 900 kB."),
        # a name clipped before its number
        ("Does it still run on Win2000?", "Win2000", "It runs on Windows 2000 and later."),
        ("在 Win2000 以后的系统上为什么报错？", "Win2000", "这是因为中文 Windows 2000 及以后的操作系统使用了新格式。"),
        # the full name for an abbreviation, and the reverse
        ("Which style does the Journal of Chemical Physics use?", "Physics", "The JCP style numbers citations."),
        ("Which style does JCP use?", "JCP", "The Journal of Chemical Physics style numbers citations."),
        ("JCP 用哪种参考文献格式？", "JCP", "The Journal of Chemical Physics style numbers citations."),
        # a slashed or hyphenated compound whose parts the document writes apart, in one passage
        ("How do I turn off ff/fl ligatures?", "ff/fl", "The ligatures ff and fl are made by the font."),
        ("怎么关闭 ff/fl 连字？", "ff/fl", "字体会把 ff 和 fl 排成连字。"),
        # Chinese: a word the PDF's line breaks cut, or its halves with a particle between them
        ("如何设置页眉？", "页眉", "页\n眉由 fancyhdr 宏包设置。"),
        ("行间距怎么调整？", "行间距", "用 setspace 宏包调整行 间距。"),
    ],
)
def test_a_term_in_another_form_is_mentioned(question: str, term: str, document: str) -> None:
    check = Analysis(question, FakeStats([document])).near_miss([document])
    assert term in check.terms
    assert term not in check.missing and term not in check.unknown


@pytest.mark.parametrize(
    ("question", "term", "document"),
    [
        ("How do I turn off ff/fl ligatures?", "ff/fl", "The ff ligature is made by the font."),
        ("How do I make a PDF/A file?", "PDF/A", "A PDF file is made by pdfwrite; a file name as A.pdf."),
        ("Which Norwegian mirror should I use?", "Norwegian", "The mirror in Nordic countries is fast."),
        ("How do I draw a 3x3 grid?", "3x3", "Draw a grid of 3 by 4 squares."),
        ("Which style does JCP use?", "JCP", "The Journal of Physics style numbers citations."),
        ("Can I use devtools?", "devtools", "Developer tools are in the Rtools bundle."),
        ("Does it still run on Win7?", "Win7", "It runs on Windows 2000 and later."),
    ],
)
def test_a_term_the_documents_lack_in_every_form_is_still_unknown(question: str, term: str, document: str) -> None:
    check = Analysis(question, FakeStats([document])).near_miss([document])
    assert term in check.unknown


def test_a_compound_counts_only_when_its_parts_meet_in_one_passage() -> None:
    apart = ["The ff ligature is made by the font.", "The fl ligature too."]
    check = Analysis("How do I turn off ff/fl ligatures?", FakeStats(apart)).near_miss(apart[:1])
    assert check.missing == ("ff/fl",) and check.unknown == ("ff/fl",)


def test_an_abbreviation_the_documents_define_after_a_chinese_name_is_its_other_name() -> None:
    glossary = "Debian 自由软件指导方针（DFSG）规定了哪些软件可以进入 main。"
    page = "DFSG 要求软件可以自由修改和再分发。"
    stats = FakeStats([glossary, page])
    check = Analysis("DFSG 允许修改吗？", stats).near_miss([page])
    assert check.missing == ()
    assert Analysis("What does the DFSG allow?").mentioned_by("DFSG")(glossary)


def test_three_words_in_a_row_are_the_acronym_the_documents_use() -> None:
    manual = "Each block is compressed with LZW, as GIF images are."
    question = "Does it support the lempel ziv welch algorithm?"
    check = Analysis(question, FakeStats([manual])).near_miss([manual])
    assert {"lempel", "ziv"} <= set(check.terms) and check.missing == ()
    other = "Each block is compressed with Huffman coding."
    assert Analysis(question, FakeStats([other])).near_miss([other]).missing == ("lempel", "ziv")


def test_a_number_with_decimals_is_no_name() -> None:
    """ "Why is 0.3 + 0.6 == 0.9 FALSE?" was refused: "the documents never mention 0.6" (they explain it with
    other numbers)."""
    assert [t.text for t in specific_terms("Why is 0.3 + 0.6 == 0.9 FALSE in R 4.2.2?")] == ["FALSE"]


def test_a_name_that_another_word_starts_is_not_its_derived_form() -> None:
    """ "Flat" at the start of a sentence made "Flatpak" a derived form of it: a near miss lost its Incorrect."""
    pages = ["Flat files are read with read.table.", "Install packages with apt."]
    assert Analysis("How do I install Flatpak apps?", FakeStats(pages)).near_miss(pages[1:]).unknown == ("Flatpak",)


def test_a_name_is_mentioned_by_the_name_it_derives_from() -> None:
    page = "The main CRAN site is at the Vienna University of Economics in Austria."
    assert Analysis("Is the main CRAN site Austrian?", FakeStats([page])).near_miss([page]).missing == ()
