"""With a model: the question read once (its asks, and the words the documents would answer it in), searched beside
its own words, and graded by verdicts; without one: the sections whose titles are closest, offered to ask with; and a
document named by its title, a follow-up in the other language."""

from __future__ import annotations

import json
import time

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from crag import prompts
from crag.asks import model_asks
from crag.config import load_settings
from crag.contract import AnswerOut
from crag.evaluator import LLMEvaluator, SimilarityEvaluator
from crag.models import BackendInfo
from crag.overview import Overview, by_title
from crag.sections import Section, SectionIndex, ask_words, sections, shown_by
from crag.types import Action, Chunk, FileResult, Source, Verdict
from tests.fakes import FakeSearcher, FixedEvaluator, HashEmbedder, ScriptedModel, WordRetriever, chunk, pipeline

SCORE = "The score is printed on A4 paper by default."
PAPER = "Paper size and printing: the printer prints the score as it is laid out."
STAFF = "Use set-global-staff-size to scale everything down."
QUESTION = "How do I make the score print smaller?"


@pytest.fixture
def settings(tmp_path):
    return load_settings(chroma_dir=tmp_path / "db", upper_threshold=0.5, lower_threshold=-0.5)


def reading(*asks: dict) -> dict:
    return {"Reading": {"asks": list(asks)}}


STAFF_WORDS = {"question": QUESTION, "answer": "Use set-global-staff-size 16.", "keywords": ["set-global-staff-size"]}


class ByText(FixedEvaluator):
    """Grades a passage by the first key of ``grades`` it holds (similarity, as the offline grader)."""

    def __init__(self, grades: dict[str, float]) -> None:
        super().__init__([])
        self.by = grades

    def grade(self, question, texts, usage=None):
        from crag.evaluator import Grade, Grading
        from crag.types import Method

        self.graded.append(question)
        return Grading([Grade(next((g for k, g in self.by.items() if k in t), -0.9), Method.SIMILARITY) for t in texts])


def verdict_grader(verdicts: dict[str, str], quote: str = "") -> LLMEvaluator:
    """An LLM grader whose model says of each passage what ``verdicts`` says of the first key it holds."""

    def respond(messages, info):
        shown = messages[-1].parts[-1].content
        passages = [p.split("</passage")[0] for p in shown.split("<passage ")[1:]]
        out = {
            f"passage_{i}": next((v for k, v in verdicts.items() if k in p), "no") for i, p in enumerate(passages, 1)
        }
        return ModelResponse(parts=[TextPart(json.dumps(out | {"quote": quote, "quoted_from": 0}))])

    return LLMEvaluator(FunctionModel(respond), SimilarityEvaluator(HashEmbedder()))


def over_words(settings, model: ScriptedModel, evaluator, chunks=(SCORE, PAPER, STAFF), backend: str = "ollama"):
    p = pipeline(settings, [], [], model, evaluator=evaluator, backend=backend)
    p.retriever = WordRetriever([chunk(text, page=i + 1, n=i) for i, text in enumerate(chunks)])
    return p


# ---------------------------------------------------------------------------------------------
# The model's words, searched beside the question's


def test_the_models_words_find_what_the_questions_miss_and_it_is_marked(settings) -> None:
    model = ScriptedModel(structured=reading(STAFF_WORDS))
    p = over_words(settings, model, ByText({"staff-size": 0.9, "score": 0.1}))
    answer = p.ask(QUESTION, top_k=2, web=False)
    found = {h.chunk.text: h.from_model for h in answer.trace.retrieved}
    assert found[STAFF] and list(found.values()).count(False) == 1, "each ranking's best: the question's, the model's"
    assert p.retriever.asked[1:3] == ["Use set-global-staff-size 16.", "set-global-staff-size"]
    assert answer.trace.expansions[0].keywords == ("set-global-staff-size",)
    # Found through the model's words and graded by similarity: the closest passage, never a Correct of its own.
    assert answer.action is Action.AMBIGUOUS
    assert max(h.score for h in answer.trace.retrieved if h.from_model) == pytest.approx(0.49)
    assert not any("searched again" in n for n in answer.trace.notes), "the model's words replace the search again"
    assert prompts.DOC_QUERY not in model.instructions


def test_a_passage_found_by_the_models_words_is_correct_when_the_model_shows_it_answers(settings) -> None:
    model = ScriptedModel(answer="Use set-global-staff-size [1].", structured=reading(STAFF_WORDS))
    grader = verdict_grader({"staff-size": "answers", "score": "partly"}, quote=STAFF)
    answer = over_words(settings, model, grader).ask(QUESTION, top_k=2, web=False)
    staff = next(h for h in answer.trace.retrieved if h.chunk.text == STAFF)
    assert staff.from_model and staff.verdict is Verdict.ANSWERS and staff.answering == STAFF
    assert answer.action is Action.CORRECT
    out = AnswerOut.of(answer, BackendInfo("ollama", "fake", "test"))
    assert out.search_words[0].keywords == ["set-global-staff-size"]
    assert {(s.found_by_model, s.verdict, s.answering) for s in out.scores} == {
        (True, "answers", STAFF),
        (False, "partly", ""),
    }


def test_a_plain_word_the_documents_never_use_does_not_hold_back_what_the_model_shows_answers(settings) -> None:
    """ "widescreen" is rare, and the manual never writes it: a similarity grade is held below Correct for it, but the
    model, reading the passage against the question, shows it answers in the manual's words."""
    slides = "Use the aspectratio=169 class option for slides of 16:9."
    question = "How do I make my slides widescreen?"
    words = {"question": question, "answer": "\\documentclass[aspectratio=169]{beamer}", "keywords": ["aspectratio"]}
    for grader, action in (
        (ByText({"aspectratio": 0.95}), Action.AMBIGUOUS),
        (verdict_grader({"aspectratio": "answers"}, quote=slides), Action.CORRECT),
    ):
        model = ScriptedModel(answer="Use aspectratio=169 [1].", structured=reading(words))
        answer = over_words(settings, model, grader, chunks=(slides, SCORE)).ask(question, top_k=2, web=False)
        assert "widescreen" in answer.trace.terms.missing
        assert answer.action is action


def test_a_name_the_passages_never_mention_holds_back_even_what_the_model_says_answers(settings) -> None:
    """A name is not said in other words: a passage that never names the Frobnicator does not answer for it, whatever
    a small model says."""
    widget = "The widget needs two processor cores."
    grader = verdict_grader({"processor": "answers"}, quote=widget)
    p = over_words(settings, ScriptedModel(), grader, chunks=(widget, "The Frobnicator has a blue case."))
    answer = p.ask("How many processor cores does the Frobnicator need?", top_k=1, web=False)
    assert answer.trace.terms.missing == ("Frobnicator",) and answer.action is Action.AMBIGUOUS


def slow_model(seconds: float, structured: dict) -> ScriptedModel:
    """A model that takes ``seconds`` to read a question, and answers at once."""

    class Slow(ScriptedModel):
        def _request(self, messages, info):
            if info.instructions == prompts.READ:
                time.sleep(seconds)
            return super()._request(messages, info)

    return Slow(answer="Use set-global-staff-size [1].", structured=structured)


def test_past_its_time_budget_the_question_is_searched_as_asked_and_the_trace_says_so(settings) -> None:
    settings = settings.model_copy(update={"model_search_timeout": 0.3})
    model = slow_model(2.0, reading(STAFF_WORDS) | {"DocQuery": {"query": "set-global-staff-size"}})
    p = over_words(settings, model, ByText({"staff-size": 0.9, "score": 0.1}))
    answer = p.ask(QUESTION, top_k=2, web=False)
    assert answer.trace.expansions[0].error == "the model took longer than 0.3 s"
    assert not any(h.from_model for h in answer.trace.retrieved)
    assert prompts.DOC_QUERY not in model.instructions, "no second wait on a slow model: the plain search stands"
    assert answer.complete and answer.action is Action.AMBIGUOUS


def test_a_model_that_fails_to_read_leaves_the_plain_search(settings) -> None:
    model = ScriptedModel(structured={"Reading": {"asks": "not a list"}})
    answer = over_words(settings, model, ByText({"score": 0.9})).ask(QUESTION, top_k=2, web=False)
    assert answer.trace.expansions[0].error.startswith("the model failed")
    assert answer.action is Action.CORRECT and answer.complete


def test_offline_and_for_a_name_no_document_mentions_no_model_is_asked(settings) -> None:
    offline = ScriptedModel(structured=reading(STAFF_WORDS))
    over_words(settings, offline, ByText({"score": 0.9}), backend="embedded").ask(QUESTION, web=False)
    assert offline.prompts == []
    model = ScriptedModel(structured=reading(STAFF_WORDS))
    answer = over_words(settings, model, ByText({"score": 0.9})).ask("How do I use pbzip2 with the score?", web=False)
    assert answer.action is Action.INCORRECT and prompts.READ not in model.instructions
    switched_off = ScriptedModel(structured=reading(STAFF_WORDS))
    settings = settings.model_copy(update={"model_search": False})
    over_words(settings, switched_off, ByText({"score": 0.9})).ask(QUESTION, web=False)
    assert prompts.READ not in switched_off.instructions


# ---------------------------------------------------------------------------------------------
# Asks, split by the model


def test_the_model_splits_a_question_of_two_asks_each_standing_alone(settings) -> None:
    question = "How do I print the score smaller, and what paper is it printed on?"
    asks = [
        {"question": "How do I print the score smaller?", "answer": "set-global-staff-size", "keywords": []},
        {"question": "What paper is the score printed on?", "answer": "A4 paper", "keywords": ["A4"]},
    ]
    model = ScriptedModel(answer="As said [1].", structured=reading(*asks))
    answer = over_words(settings, model, ByText({"staff-size": 0.9, "A4": 0.9})).ask(question, web=False)
    assert "**1. How do I print the score smaller?**" in answer.text
    assert "**2. What paper is the score printed on?**" in answer.text
    assert [e.ask for e in answer.trace.expansions] == [a["question"] for a in asks]
    assert any("as the model read it" in n for n in answer.trace.notes)
    assert model.instructions.count(prompts.READ) == 1, "one reading for the whole question"


FIGURE_ASKS = [
    {"question": "How do I make a figure?", "answer": "figure environment", "keywords": ["figure"]},
    {"question": "How do I caption a figure?", "answer": "\\caption", "keywords": ["caption"]},
]
图片 = [
    {"question": "怎么插入图片？", "answer": "figure 环境"},
    {"question": "怎么给图片加标题？", "answer": "\\caption"},
]


@pytest.mark.parametrize(
    ("question", "asks", "split"),
    [
        ("How do I make a figure?", FIGURE_ASKS, False),  # a small model's steps of one answer: no asks of the question
        ("How do I make a figure, and how do I caption it?", FIGURE_ASKS, True),
        ("怎么插入图片，以及怎么加标题？", 图片, True),
        ("怎么插入带标题的图片？", 图片, False),
    ],
)
def test_a_models_split_is_taken_only_where_the_question_joins_two_asks(question, asks, split: bool) -> None:
    got = model_asks(question, prompts.Reading.model_validate({"asks": asks}))
    assert len(got) == (2 if split else 1)
    if not split:  # one ask, searched with all the model's words
        assert got[0].ask == question and got[0].answer == " ".join(a["answer"] for a in asks)


def test_a_split_into_asks_that_share_no_word_with_the_question_is_not_taken() -> None:
    asks = [{"question": "What is TeX?", "answer": ""}, {"question": "Who wrote it?", "answer": ""}]
    got = model_asks(
        "How do I install R, and how do I update packages?", prompts.Reading.model_validate({"asks": asks})
    )
    assert len(got) == 1


# ---------------------------------------------------------------------------------------------
# Without a model: the sections closest to the question, offered


def titled(file: str, n: int, title: str, text: str, page: int) -> Chunk:
    return Chunk(id=f"{file}-{n}", text=text, file=file, pages=(page,), section=title)


GUIDE = [
    titled("beamer.pdf", 0, "Beamer > 2.3 Navigation symbols", "The navigation bar shows small icons.", 12),
    titled("beamer.pdf", 1, "Beamer > 3.1 Aspect ratio", "The class option aspectratio sets the shape.", 20),
    titled("beamer.pdf", 2, "Beamer > 4 Themes", "Themes change the colours of every frame.", 30),
    titled("beamer.pdf", 3, "Beamer > 5 Overlays", "Overlays uncover items one at a time.", 40),
]


def test_an_answer_not_found_for_sure_offers_the_closest_sections_and_not_those_it_shows(settings) -> None:
    p = pipeline(settings, GUIDE, [0.1, -0.9, -0.9, -0.9], backend="embedded")
    answer = p.ask("How do I hide the navigation icons and the overlays?", web=False)
    assert answer.action is Action.AMBIGUOUS
    assert answer.suggestions, "the documents' own words, offered"
    assert all(s.title != "Navigation symbols" for s in answer.suggestions), "cited already: not offered again"
    assert [(s.title, s.file, s.page) for s in answer.suggestions][:1] == [("Overlays", "beamer.pdf", 40)]
    assert len(answer.suggestions) <= 3
    correct = pipeline(settings, GUIDE, [0.9, -0.9, -0.9, -0.9], backend="embedded").ask("How do I hide the icons?")
    assert correct.action is Action.CORRECT and correct.suggestions == ()


def test_sections_come_from_bookmarks_and_from_the_headings_below_them_and_their_numbers_are_not_asked() -> None:
    """The index keeps a PDF's top bookmarks only: the headings its passages sit under go on where they stop."""
    marked = FileResult(file="beamer.pdf", status="indexed", outline=((1, "2.3 Navigation symbols", 12),))
    found = sections(GUIDE, [marked])
    assert [(s.title, s.page) for s in found] == [
        ("2.3 Navigation symbols", 12),
        ("3.1 Aspect ratio", 20),
        ("4 Themes", 30),
        ("5 Overlays", 40),
    ], "a heading named as a bookmark is one section"
    assert found[0].lead == "The navigation bar shows small icons."
    headings = sections(GUIDE, [])
    assert [ask_words(s.title) for s in headings] == ["Navigation symbols", "Aspect ratio", "Themes", "Overlays"]
    assert (
        ask_words("第三章 安装") == "安装"
        and ask_words("A.2 Options") == "Options"
        and ask_words("A Guide") == "A Guide"
    )


def test_the_closest_sections_by_words_and_meaning_and_those_shown_are_left_out() -> None:
    index = SectionIndex(sections(GUIDE, []), HashEmbedder())
    embed = HashEmbedder().embed
    question = "How do I change the colours of the themes?"
    nothing: list[Source] = []
    best = index.closest(question, embed([question])[0], None, shown_by(nothing))
    assert ask_words(best[0].title) == "Themes"
    shown = [Source(n=1, kind="local", text="", file="beamer.pdf", pages=(30,), section="Beamer > 4 Themes")]
    assert "Themes" not in [s.title for s in index.closest(question, embed([question])[0], None, shown_by(shown))]
    assert index.closest(question, embed([question])[0], ["other.pdf"], shown_by(nothing)) == []
    unrelated = "What is the capital of Australia?"
    assert index.closest(unrelated, embed([unrelated])[0], None, shown_by(nothing)) == []
    # A section whose words the question shares nothing of, but under which a deeper search found a passage.
    deeper = index.closest(unrelated, embed([unrelated])[0], None, shown_by(nothing), [GUIDE[1]])
    assert [ask_words(s.title) for s in deeper] == ["Aspect ratio"]


def test_a_section_is_offered_with_its_document_and_page_by_every_edge(settings) -> None:
    p = pipeline(settings, GUIDE, [0.1, -0.9, -0.9, -0.9], backend="embedded")
    answer = p.ask("How do I hide the navigation icons and the overlays?", web=False)
    out = AnswerOut.of(answer, BackendInfo("embedded", "fake", "test"))
    assert [(s.title, s.file, s.page) for s in out.suggestions] == [
        (s.title, s.file, s.page) for s in answer.suggestions
    ]
    assert out.suggestions and isinstance(answer.suggestions[0].page, int)
    assert all(isinstance(s, Section) is False for s in answer.suggestions)


# ---------------------------------------------------------------------------------------------
# A document named by its title; a follow-up in the other language


def overview_of(file: str, title: str, outline: tuple[tuple[int, str, int], ...] = ()) -> Overview:
    return Overview(file=file, title=title, pages=10, said=(), outline=outline)


DOCUMENTS = [
    overview_of("beamer.pdf", "The beamer class User Guide for version 3.71", ((0, "Tutorial", 3),)),
    overview_of("R-intro.pdf", "An Introduction to R"),
    overview_of("texlive-zh-cn.pdf", "TeX Live 指南—2022", ((0, "1 引言", 1), (0, "3 安装", 10))),
    overview_of("lshort.pdf", "一份（不太）简短的 LaTeX 介绍", ((0, "第一章 LaTeX 的基本概念", 1),)),
    overview_of("crag-user-guide.pdf", "CRAG knowledge base user guide"),
]


@pytest.mark.parametrize(
    ("question", "files"),
    [
        ("What is the Beamer user guide about?", ["beamer.pdf"]),
        ("这份安装指南讲了什么", ["texlive-zh-cn.pdf"]),  # its outline has 安装; every title is a 指南 or no word
        ("What is the user guide about?", ["beamer.pdf", "crag-user-guide.pdf"]),  # a tie: both
        ("What are these documents about?", []),  # no title word: every document, as before
    ],
)
def test_a_document_is_named_by_the_words_of_its_title_or_outline(question: str, files: list[str]) -> None:
    assert by_title(question, DOCUMENTS) == files


def test_a_document_named_by_its_title_is_the_one_described(settings) -> None:
    chunks = [
        Chunk(id="b0", text="This user guide describes the beamer class for slides.", file="beamer.pdf", pages=(1,)),
        Chunk(id="r0", text="This manual is an introduction to R, a system for statistics.", file="R.pdf", pages=(1,)),
    ]
    p = pipeline(settings, chunks, [], backend="embedded")
    answer = p.ask("What is the beamer user guide about?", web=False)
    assert {s.file for s in answer.sources} == {"beamer.pdf"}


def test_a_follow_up_in_the_other_language_goes_on_from_the_question_before(settings) -> None:
    """ "那在苹果电脑上呢？" after an English question names nothing an English passage could: a follow-up still."""
    install = "To install on macOS, open the installer package. On Windows run the setup program."
    p = pipeline(settings, [chunk(install)], [], evaluator=ByText({"macOS": 0.2}), backend="embedded")
    history = [("user", "How do I install it on Windows?"), ("assistant", "“…setup program…” [1]")]
    answer = p.ask("那在苹果电脑上呢？", history=history, web=False)
    assert any(n.startswith("a follow-up: read with the words") for n in answer.trace.notes), answer.trace.notes
    assert answer.sources and answer.action is not Action.INCORRECT


def test_a_question_in_the_other_language_that_stands_alone_is_still_a_new_one(settings) -> None:
    install = "To install on macOS, open the installer package."
    p = pipeline(settings, [chunk(install)], [], evaluator=ByText({"macOS": 0.2}), backend="embedded")
    history = [("user", "How do I install it on Windows?"), ("assistant", "“…setup program…” [1]")]
    answer = p.ask("澳大利亚的首都是哪个城市？", history=history, web=False)
    assert not any(n.startswith("a follow-up") for n in answer.trace.notes)


def test_offline_the_search_asks_no_model_and_searcher_stays_idle(settings) -> None:
    searcher = FakeSearcher()
    p = pipeline(settings, GUIDE, [0.1, -0.9, -0.9, -0.9], backend="embedded", searcher=searcher)
    p.ask("How do I hide the navigation icons?", web=False)
    assert searcher.queries == []


def test_the_questions_own_best_passage_is_kept_however_few_are_graded(settings) -> None:
    """With one passage to grade, the model's two rankings outvote the question's: its best stays all the same."""
    model = ScriptedModel(structured=reading(STAFF_WORDS))
    p = over_words(settings, model, ByText({"staff-size": 0.9, "score": 0.1}))
    answer = p.ask(QUESTION, top_k=1, web=False)
    [kept] = answer.trace.retrieved
    assert not kept.from_model and kept.chunk.text in (SCORE, PAPER)


def test_an_answer_stands_when_its_sections_cannot_be_offered(settings) -> None:
    p = pipeline(settings, GUIDE, [0.1, -0.9, -0.9, -0.9], backend="embedded")

    def broken(*args, **kwargs):
        raise ConnectionError("the embedder went away")

    p.retriever.sections = broken
    answer = p.ask("How do I hide the navigation icons and the overlays?", web=False)
    assert answer.complete and answer.action is Action.AMBIGUOUS and answer.suggestions == ()


def test_a_follow_ups_sections_are_sought_with_the_question_it_stands_for(settings) -> None:
    """ "And the overlays?" names no section: the question the conversation makes of it does."""
    settings = settings.model_copy(update={"model_search": False})
    standalone = {"Standalone": {"question": "How do I hide the overlays?"}}
    model = ScriptedModel(answer="Not said [1].", structured=standalone)
    p = pipeline(settings, GUIDE, [0.1, -0.9, -0.9, -0.9], model)
    sought: list[str] = []
    sections = p.retriever.sections
    p.retriever.sections = lambda question, *rest: sought.append(question) or sections(question, *rest)
    history = [("user", "How do I hide the navigation icons?"), ("assistant", "Not said.")]
    answer = p.ask("And the overlays?", history, web=False)
    assert answer.action is Action.AMBIGUOUS and sought == ["How do I hide the overlays?"]


def test_an_unsure_answer_quotes_the_passage_a_small_model_said_no_of_as_similarity_would(settings) -> None:
    """A 1.5B model says "no" of the very passage that answers: the action stays the verdicts' (Ambiguous), and what
    is quoted is what the similarity grades would quote, that passage first."""

    class Similar(SimilarityEvaluator):  # the similarity grades: the staff size passage is the closest
        def grade(self, question, texts, usage=None):
            return ByText({"staff-size": 0.9, "score": 0.2, "Paper": 0.1}).grade(question, texts)

    settings = settings.model_copy(update={"model_search": False})
    grader = verdict_grader({"staff-size": "no", "score": "partly", "Paper": "partly"})
    grader.fallback = Similar(HashEmbedder())
    answer = over_words(settings, ScriptedModel(answer="Not written."), grader).ask(QUESTION, web=False)
    staff = next(h for h in answer.trace.retrieved if h.chunk.text == STAFF)
    assert staff.verdict is Verdict.NO and staff.score == pytest.approx(-0.9), "the verdict grades it, as before"
    assert answer.action is Action.AMBIGUOUS
    assert "set-global-staff-size" in answer.text, "the closest passage by similarity is quoted"
