"""The retrieval evaluator: near misses caught by the question's specific terms, and the LLM grader."""

from __future__ import annotations

import json
import time

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from crag import prompts
from crag.analysis import coverage, word_weights
from crag.config import load_settings
from crag.evaluator import LLMEvaluator, SimilarityEvaluator, calibrate
from crag.evidence import LEADS
from crag.parts import plain
from crag.support import Grounder, Grounding, unsupported
from crag.text import width
from crag.tuning import TUNING
from crag.types import Action, AnswerKind, Method, Source, Verdict, WebResult
from tests.fakes import FakeSearcher, FakeStats, HashEmbedder, ScriptedModel, chunk, pipeline

GHOSTSCRIPT = (
    "Ghostscript converts PostScript to PDF with the pdfwrite device: gs -sDEVICE=pdfwrite -o out.pdf in.ps. "
    "Use -dPDFSETTINGS=/printer for print quality and -dCompatibilityLevel=1.4 to choose the PDF version."
)
CTEX = "ctex 宏包设置中文字体时，使用 \\setCJKmainfont 命令指定正文字体，例如宋体或楷体。"


@pytest.fixture
def settings(tmp_path):
    return load_settings(chroma_dir=tmp_path / "db", upper_threshold=0.5, lower_threshold=-0.5)


def test_a_term_elsewhere_in_the_documents_caps_below_correct(settings) -> None:
    pages = [chunk(GHOSTSCRIPT), chunk("Fonts are embedded with -dEmbedAllFonts=true.", n=1)]
    p = pipeline(settings, pages[:1], [0.9], backend="embedded")
    p.retriever.term_stats = lambda scope=None: FakeStats([c.text for c in pages])  # the index knows both pages
    answer = p.ask("How do I use -dEmbedAllFonts=true with pdfwrite?", web=False)
    assert answer.trace.terms.missing == ("dEmbedAllFonts",) and answer.trace.terms.unknown == ()
    assert answer.action is Action.AMBIGUOUS


@pytest.mark.parametrize(
    ("question", "doc", "term", "message"),
    [
        (
            "How do I make Ghostscript produce a PDF/A file?",
            GHOSTSCRIPT,
            "PDF/A",
            "Your documents never mention “PDF/A”.",
        ),
        ("用 xeCJK 宏包时怎么设置中文正文字体？", CTEX, "xeCJK", "你的文档中没有提到“xeCJK”。"),
    ],
)
def test_a_near_miss_is_incorrect_says_why_and_lists_the_closest_passages(
    settings, question: str, doc: str, term: str, message: str
) -> None:
    """A true near miss stays Incorrect: the topic is in the documents, the asked-for thing in no form. The answer
    says what is missing, then still shows the closest passages under a lead that says they may not answer: the
    user can judge, and nothing is invented."""
    searcher = FakeSearcher()
    for backend in ("embedded", "ollama"):  # a model never writes from passages judged not to answer
        model = ScriptedModel()
        p = pipeline(settings, [chunk(doc)], [0.95], model, searcher, backend=backend)
        answer = p.ask(question, web=False)
        assert answer.action is Action.INCORRECT, "the topic matches, the question is not answered"
        assert answer.kind is AnswerKind.EVIDENCE and answer.text.startswith(message)
        lead, quote = answer.text.split("\n\n", 1)[1].splitlines()[:2]
        assert lead in (LEADS[("en", "closest")], LEADS[("zh", "closest")])
        assert quote.endswith("” [1]") and [s.n for s in answer.cited_sources] == [1]
        assert any(f"never mention “{term}”" in note for note in answer.trace.notes)
        assert prompts.ANSWER not in model.instructions, "no model was asked to write"


def test_the_same_question_without_the_missing_term_is_answered(settings) -> None:
    p = pipeline(settings, [chunk(GHOSTSCRIPT)], [0.95], backend="embedded")
    answer = p.ask("How do I make Ghostscript produce a PDF file?", web=False)
    assert answer.action is Action.CORRECT and "pdfwrite" in answer.text


def test_coverage_weighs_rare_document_words_over_everyday_ones() -> None:
    stats = FakeStats(["the widget needs cores", "the widget is blue", "the widget has a manual", "cores matter"])
    scorer = SimilarityEvaluator(HashEmbedder(), lambda: stats)
    raw = scorer.raw("How many cores does the widget need?", ["It needs cores.", "It is a widget."])
    assert raw[0] > raw[1], "'cores' is rarer in these documents than 'widget'"


# ---------------------------------------------------------------------------------------------
# The LLM grader: one request for all chunks, validated, clamped, retried once, with a fallback


def grader(reply, calls: list | None = None, delay: float = 0.0) -> LLMEvaluator:
    def respond(messages, info):
        if calls is not None:
            calls.append(info.model_request_parameters.output_object.json_schema)
        time.sleep(delay)
        text = reply(len(calls or [])) if callable(reply) else reply
        return ModelResponse(parts=[TextPart(text)])

    return LLMEvaluator(FunctionModel(respond), SimilarityEvaluator(HashEmbedder()), timeout=0.5)


TEXTS = ["The widget needs two processor cores.", "Bananas are yellow."]


def verdicts(*said: str, quote: str = "", quoted_from: int = 0) -> str:
    return json.dumps({f"passage_{i}": v for i, v in enumerate(said, 1)} | {"quote": quote, "quoted_from": quoted_from})


def test_llm_grader_grades_all_chunks_in_one_request() -> None:
    calls: list = []
    reply = verdicts("answers", "no", quote="The widget needs two processor cores.", quoted_from=1)
    grading = grader(reply, calls).grade("How many cores?", TEXTS)
    assert [(g.score, g.method, g.verdict) for g in grading.grades] == [
        (TUNING.verdicts.answers, "llm", Verdict.ANSWERS),
        (TUNING.verdicts.no, "llm", Verdict.NO),
    ]
    assert [g.answering for g in grading.grades] == ["The widget needs two processor cores.", ""]
    assert all(g.trusted for g in grading.grades), "the model's grades say whether a passage answers"
    assert len(calls) == 1
    assert set(calls[0]["properties"]) == {"passage_1", "passage_2", "quote", "quoted_from"}
    assert set(calls[0]["required"]) == {"passage_1", "passage_2"}
    assert calls[0]["properties"]["passage_1"]["enum"] == ["answers", "partly", "no"]


def test_an_answer_the_model_cannot_show_in_its_passage_is_only_ambiguous() -> None:
    """A small model says "answers" of anything: a passage is Correct only with a sentence of its own that answers.
    The quote is the passage's that holds it, whichever number the model gave. A partial verdict takes the similarity
    grade, below Correct: a small model says "partly" of passages on any topic."""
    question = "How many processor cores does the widget need?"
    similar = [g.score for g in SimilarityEvaluator(HashEmbedder()).grade(question, TEXTS).grades]
    partial = [min(s, TUNING.verdicts.partial_ceiling) for s in similar]
    assert partial[0] > partial[1], "the widget's page is closer than the bananas'"
    said = verdicts("answers", "no", quote="Widgets run on four cores.", quoted_from=1)
    invented = grader(said).grade(question, TEXTS)
    assert [g.score for g in invented.grades] == [partial[0], TUNING.verdicts.no]
    assert invented.grades[0].answering == "", "a sentence its passage does not hold is nobody's"
    misnumbered = grader(verdicts("answers", "answers", quote="the widget needs two processor cores", quoted_from=2))
    graded = misnumbered.grade(question, TEXTS).grades
    assert [g.score for g in graded] == [TUNING.verdicts.answers, partial[1]]
    partly = grader(verdicts("partly", "partly")).grade(question, TEXTS).grades
    assert [g.score for g in partly] == partial and all(g.similarity is not None for g in partly)


def test_the_grader_reads_the_sentences_closest_to_the_question_not_the_whole_passage() -> None:
    """Five whole passages take a 1.5B model minutes on 2 cores: it reads each one's sentences closest to the
    question, in their order, under its heading."""
    filler = " ".join(f"Chapter {n} tells of the history of the project in the year {1990 + n}." for n in range(20))
    passage = f"Requirements\n{filler} The widget needs two processor cores. {filler}"
    prompts_seen: list[str] = []

    def respond(messages, info):
        prompts_seen.append(messages[-1].parts[-1].content)
        return ModelResponse(parts=[TextPart(verdicts("answers"))])

    evaluator = LLMEvaluator(FunctionModel(respond), SimilarityEvaluator(HashEmbedder()))
    evaluator.grade("How many processor cores does the widget need?", [passage])
    shown = prompts_seen[0].split("<passage 1>")[1].split("</passage 1>")[0].strip()
    assert shown.startswith("Requirements\n") and "The widget needs two processor cores." in shown
    assert width(shown) <= TUNING.verdicts.excerpt_chars + 120 < width(passage) / 4


def test_llm_grader_retries_junk_once_then_succeeds() -> None:
    calls: list = []
    replies = {1: "not json at all", 2: verdicts("partly", "no")}
    grading = grader(lambda n: replies[n], calls).grade("q", TEXTS)
    assert len(calls) == 2 and [g.method for g in grading.grades] == ["llm", "llm"]


@pytest.mark.reliability
def test_llm_grader_junk_twice_falls_back_to_similarity() -> None:
    calls: list = []
    grading = grader('{"passage_1": "high"}', calls).grade("How many cores does the widget need?", TEXTS)
    assert len(calls) == 2
    assert all(g.method is Method.FALLBACK and g.detail.startswith("grader failed") for g in grading.grades)
    assert not any(g.trusted for g in grading.grades), "similarity's grades in the model's place: on the topic only"
    fallback = SimilarityEvaluator(HashEmbedder()).grade("How many cores does the widget need?", TEXTS)
    assert [g.score for g in grading.grades] == [g.score for g in fallback.grades]


@pytest.mark.reliability
def test_llm_grader_timeout_falls_back() -> None:
    grading = grader(verdicts("answers", "answers"), delay=2.0).grade("q", TEXTS)
    assert all(g.method is Method.FALLBACK and "timed out after 0.5 s" in g.detail for g in grading.grades)


def test_the_models_keywords_are_the_web_query_so_the_web_costs_no_extra_call(settings) -> None:
    reading = {"asks": [{"question": "Latest widget version?", "answer": "", "keywords": ["widget", "version"]}]}
    model = ScriptedModel(answer="Version 4.2 [1].", structured={"Reading": reading})
    web = WebResult("Widget FAQ", "https://example.org/widget", "", "The latest widget version is 4.2.")

    def respond(messages, info):
        return ModelResponse(parts=[TextPart(verdicts("no"))])

    evaluator = LLMEvaluator(FunctionModel(respond), SimilarityEvaluator(HashEmbedder()))
    searcher = FakeSearcher([web])
    answer = pipeline(settings, [chunk(GHOSTSCRIPT)], [], model, searcher, evaluator).ask("Latest widget version?")
    assert answer.action is Action.INCORRECT and searcher.queries == ["widget version"]
    assert answer.trace.llm_calls_before_answer == 3  # read (with the keywords) + grade + generate


def test_similarity_scores_are_calibrated_and_deterministic() -> None:
    scorer = SimilarityEvaluator(HashEmbedder())
    first = scorer.grade("How many cores does the widget need?", TEXTS).grades
    assert first == scorer.grade("How many cores does the widget need?", TEXTS).grades
    assert -1 <= first[1].score < first[0].score <= 1
    assert calibrate(0.0) < -0.9 and calibrate(1.0) > 0.9


def test_a_chinese_word_the_dictionary_splits_still_counts_when_the_documents_use_it() -> None:
    # jieba's dictionary has neither 双栏 nor 宏包: "双栏排版" is cut 双 / 栏 / 排版, and single characters say nothing.
    docs = [
        "balance 宏包提供 \\balance 命令，使双栏文档底部对齐。",
        "最后一页的排版很难看。",
        "其他宏包。",
    ]
    stats = FakeStats(docs)
    question = "双栏排版时最后一页高度不一样，有没有宏包能让底部对齐？"
    weights = word_weights(question, stats)
    assert {"双栏", "宏包"} <= weights.keys()
    assert "包能" not in weights, "a pair no document uses is no word"
    assert "宏包" not in word_weights(question, None), "without the index there is nothing to check a pair against"
    answer, other = coverage(weights, docs[0]), coverage(weights, docs[1])
    assert answer > other, "the passage that names the package and the two columns answers the question"


# ---------------------------------------------------------------------------------------------
# Support: what a written answer states that nothing it was given says

GS_GUIDE = "Ghostscript writes PDF with the pdfwrite device: gs -sDEVICE=pdfwrite -o out.pdf in.ps."


@pytest.mark.parametrize(
    ("answer", "given", "stated"),
    [
        # An option, a version and a name that nothing given mentions (seen from a tiny model: "PS_A" for PDF/A).
        (
            "Use the PS_A option: gs -sDEVICE=pdfwrite -dPS_A=1 -o out.pdf in.ps [1]. It works since 9.50.",
            [GS_GUIDE, "How do I make Ghostscript produce a PDF/A file?"],
            ("PS_A", "9.50"),
        ),
        (
            "The capital of Australia is Canberra [1].",
            ["R is a language.", "What is the capital of Australia?"],
            ("Canberra",),
        ),
        ("澳大利亚的首都是堪培拉 [1]。", ["R 是一种统计语言。", "澳大利亚的首都是哪里？"], ("堪培拉",)),
        (
            "用 `devtools::install_github()` 安装 [1]。",
            ["用 install.packages() 安装宏包。", "怎么从 GitHub 安装 R 包？"],
            ("devtools::install_github",),
        ),
        ("head(x, 10) shows 10 rows [1].", ["summary() will output only the first six rows.", "head?"], ("10",)),
        # What the sources or the question say is supported, in any case, form or script.
        ("Use gs -sDEVICE=pdfwrite -o out.pdf in.ps [1].", [GS_GUIDE, "How do I make a PDF with Ghostscript?"], ()),
        (
            "你可以用 tlmgr update --all 更新所有宏包 [1]。",
            ["使用 tlmgr update --all 可以更新所有宏包。", "如何更新？"],
            (),
        ),
        ("I don't know: the sources do not say.", [GS_GUIDE, "What is PDF/A?"], ()),
        # Citations, list numbers and Markdown are not statements; everyday words are not names.
        (
            "1. **Install** the dependencies [12].\n2. Run it [3].",
            ["Install the dependencies, then run it.", "How?"],
            (),
        ),
        ("Reinstall everything after upgrading [1].", ["Upgrade the packages.", "What after an upgrade?"], ()),
        ("Use a wrapper, i.e. a function (e.g. a closure) [1].", ["A closure is a function.", "What is it?"], ()),
        ("在 script 里调用 package 即可 [1]。", ["在脚本里调用宏包即可。", "怎么调用？"], ()),
        ("注意：Package 需要先安装，Script 也可以 [1]。", ["宏包需要先安装。", "怎么办？"], ()),
        # A code example's own names and strings are not statements; the functions and options it uses are.
        ('```r\nmy_data <- read.csv("data.csv", header = TRUE)\n```', ["Use read.csv() to read it.", "How?"], ()),
        ("Run `gs -dPS_A=1 file.ps` [1].", [GS_GUIDE, "How?"], ("-dPS_A",)),
        ('```r\nprint(paste("a", "b\\n"))\nx <- nrowz(df)\n```', ["Use it.", "How?"], ("nrowz",)),
        ("Use `fread()` from data.table [1].", ["Use read.csv() to read it.", "How?"], ("fread", "data.table")),
        # Common acronyms; numbers as the sources write them, next to Chinese too; invented ones caught anyway.
        ("Save it as PDF, then click OK; TRUE means yes [1].", ["Save the file.", "How?"], ()),
        (
            "It holds 1,000 rows of 1500 MB, the 21st of 2023-04-21, 10-15 pages [1］.",
            ["1000 rows, 1,500MB, 21st, 2023-04-21, pages 10 to 15", "How many?"],
            (),
        ),
        ("共有 15 个步骤，2024年发布 [1]。", ["共有 12 个步骤。", "几个步骤？"], ("15", "2024")),
    ],
)
def test_what_a_written_answer_states_and_nothing_given_says_is_flagged(
    answer: str, given: list[str], stated: tuple
) -> None:
    assert unsupported(answer, given) == stated


GROUNDING_SOURCES = [
    Source(
        n=1, kind="local", text="Use write.csv(df, file) to save a data frame. The console line limit is 4095 bytes."
    ),
    Source(n=2, kind="local", text="LaTeX 中插入表格使用 tabular 环境。表格的列用 & 分隔。"),
]


def grounded(answer: str, question: str, pieces: int = 1) -> tuple[str, Grounding]:
    """The answer as grounding lets it through, fed in ``pieces`` of about one size, as a stream comes."""
    grounder = Grounder(GROUNDING_SOURCES, [question, *(s.text for s in GROUNDING_SOURCES)], question)
    size = max(1, len(answer) // pieces)
    out = "".join(plain(grounder.feed(answer[i : i + size])) for i in range(0, len(answer), size))
    return out + plain(grounder.close()), grounder.counts


@pytest.mark.parametrize(
    ("answer", "question", "shown"),
    [
        # The model's citation of a source that does not hold the sentence moves to the one that does.
        ("Save it with write.csv() [2].", "How do I save a data frame?", "Save it with write.csv() [1]."),
        # Chinese: the citation before the full stop, no space; a sentence that cites nothing gets its source.
        ("使用 tabular 环境插入表格。", "如何在 LaTeX 中插入表格？", "使用 tabular 环境插入表格[2]。"),
        # An invented number, a stray list number, a line of citations only: cut.
        (
            "Here it is:\nThe limit is 3095 bytes [1].\nIt is 4095 bytes [1].\n4\n[1] [2]",
            "What is the console line limit?",
            "Here it is:\nIt is 4095 bytes [1].",
        ),
        # Code that names only what was given stays (it takes no citation); a sentence said again is cut.
        (
            "```r\nwrite.csv(df, 'out.csv')\n```\nwrite.csv() saves it [1]. write.csv() saves it [1].",
            "How do I save a data frame?",
            "```r\nwrite.csv(df, 'out.csv')\n```\nwrite.csv() saves it [1].",
        ),
        # Prose in a fence is prose: judged and cited as such, shown without the fence; cut when nothing backs it.
        ("```text\nIt is 4095 bytes.\n```", "What is the console line limit?", "It is 4095 bytes [1]."),
        ("```plaintext\nThe capital of Australia is Melbourne.\n```", "What is the capital of Australia?", ""),
        # A sentence in the other language than the question's is cut.
        (
            "使用 tabular 环境[2]。You insert a table with the tabular environment in LaTeX documents.",
            "如何在 LaTeX 中插入表格？",
            "使用 tabular 环境[2]。",
        ),
        # Nothing a source backs: nothing at all, not even the framing.
        ("Sure! Here is how:\nThe capital of Australia is Melbourne.", "What is the capital of Australia?", ""),
    ],
)
@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_a_written_answer_is_let_through_as_its_sources_back_it(
    answer: str, question: str, shown: str, pieces: int
) -> None:
    assert grounded(answer, question, pieces)[0] == shown


def test_grounding_counts_what_it_cut_and_cited() -> None:
    answer = "Use write.csv() [2]. Use write.csv() [1]. The limit is 3095 bytes. Paris is nice and sunny in spring."
    text, counts = grounded(answer, "How do I save a data frame?")
    assert text == "Use write.csv() [1]."
    assert (counts.stated, counts.grounded, counts.attached, counts.repeated) == (3, 1, 1, 1)
    assert (counts.invented, counts.unbacked) == (["3095"], 1)
    assert counts.notes() == [
        "sentences of the model's answer were cut: some named “3095”, which nothing given mentions; "
        "1 stated what no source holds; 1 repeated what was said before",
        "1 sentence(s) cited no source that holds what they say: the app cites one that does",
    ]


@pytest.mark.parametrize(
    ("question", "doc", "term"),
    [
        (
            "How do I unzip a .bz2 file?",
            "Use bunzip2 file.bz2 to decompress a .bz2 file; the original is removed.",
            "unzip",
        ),
        ("安装时有弹窗报错怎么办？", "安装时出现错误对话框，请以管理员身份运行 install-tl.bat 重新安装。", "弹窗"),
    ],
)
def test_an_everyday_word_the_documents_never_use_is_evidence_not_a_veto(
    settings, question: str, doc: str, term: str
) -> None:
    """A user's everyday word ("unzip" where the manual writes "decompress") that no passage uses caps the action at
    Ambiguous: the passages are shown as the closest, with their [n], and no message says the documents never mention
    what they say in other words."""
    p = pipeline(settings, [chunk(doc)], [0.95], backend="embedded")
    answer = p.ask(question, web=False)
    assert answer.trace.terms.missing == (term,) and answer.trace.terms.unknown == ()
    assert answer.action is Action.AMBIGUOUS
    lead, quote = answer.text.splitlines()[:2]
    assert lead in (LEADS[("en", "closest")], LEADS[("zh", "closest")]) and quote.endswith("” [1]")
    assert "never mention" not in answer.text and "没有提到" not in answer.text


def test_a_partial_verdict_rests_on_similarity_and_is_not_trusted_as_an_answer() -> None:
    """Only what the model shows answers (a sentence of the passage) or says does not is its own word; "partly", or
    "answers" with nothing to show, takes the similarity grade and is held to the question's terms as that is."""
    said = verdicts("answers", "partly", quote="The widget needs two processor cores.", quoted_from=1)
    shown, partial = grader(said).grade("How many processor cores does the widget need?", TEXTS).grades
    assert shown.trusted and not partial.trusted
    unshown, no = grader(verdicts("answers", "no")).grade("q", TEXTS).grades
    assert not unshown.trusted and no.trusted


def test_a_word_or_two_is_no_sentence_that_answers() -> None:
    from crag.evaluator import holds_quote

    passage = "Ghostscript writes the output device's file: gs -sDEVICE=pdfwrite -o out.pdf in.ps."
    assert not holds_quote(passage, "device") and not holds_quote(passage, "the output")
    assert holds_quote(passage, "Ghostscript writes the output device's file")
