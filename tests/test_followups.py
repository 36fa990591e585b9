"""Follow-up questions: read with the conversation without a model on the embedded backend, a model's junk rewrite
rejected, and a new question never answered with the words of the one before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from pydantic_ai.usage import RunUsage

from crag.config import load_settings
from crag.evaluator import Evaluator, Grade, Grading
from crag.followups import conversation_query, stands_alone
from crag.types import Action, Method, ScoredChunk
from tests.fakes import ScriptedModel, chunk, pipeline
from tests.test_pipeline import DOC


@pytest.fixture
def settings(tmp_path):
    return load_settings(chroma_dir=tmp_path / "db", upper_threshold=0.5, lower_threshold=-0.5)


def test_an_embedded_follow_up_uses_the_conversation_without_a_model(settings) -> None:
    """No model condenses a follow-up on the embedded backend: a tiny model turns a Chinese one into 1.1.1.1…"""
    model = ScriptedModel(structured={"Standalone": {"question": "1.1.1.1.1.1.1.1"}})
    p = pipeline(settings, [chunk(ZH_MEMORY)], [0.9], model, backend="embedded")
    history = [("user", "小部件需要几个处理器核心？"), ("assistant", "“小部件需要两个处理器核心。” [1]")]
    answer = p.ask("那内存呢？", history=history)
    assert model.prompts == []
    assert p.retriever.asked[0] == "那内存呢？" and "处理器" in p.retriever.asked[1] and "部件" in p.retriever.asked[1]
    assert answer.action is Action.CORRECT and "内存需要八百兆" in answer.text
    assert "1.1.1" not in answer.trace.standalone_question


ZH_MEMORY = "小部件需要两个处理器核心。小部件的内存需要八百兆。"


def turns(*questions: str) -> list[tuple[str, str]]:
    return [turn for q in questions for turn in (("user", q), ("assistant", "“…” [1]"))]


INSTALL = "How do I install R from source on Unix-alikes?"


@pytest.mark.parametrize(
    ("history", "question", "query"),
    [
        # Read with "and on Windows?" alone, "what about macOS?" loses "install R" and quotes MacTeX passages
        # under a Correct badge.
        (turns(INSTALL, "and on Windows?"), "what about macOS?", f"what about macOS? and on Windows? {INSTALL}"),
        (turns("那在 Windows 上呢？"), "还有 macOS 呢？", "还有 macOS 呢？ 那在 Windows 上呢？"),
        (turns(INSTALL, "Tell me more"), "And on Windows?", f"And on Windows? Tell me more {INSTALL}"),
        # The question that set the topic ends the chain: one before it is another topic.
        (turns("How do I run R in batch mode?", INSTALL), "and on Windows?", f"and on Windows? {INSTALL}"),
        (
            turns(INSTALL, "and on Windows?"),
            "How much memory does R need?",
            f"How much memory does R need? and on Windows? {INSTALL}",
        ),
        (
            turns(INSTALL, "and on macOS?", "and on Windows?", "and on Solaris?"),
            "and on AIX?",
            "and on AIX? and on Solaris? and on Windows? and on macOS?",
        ),
        (turns(INSTALL), INSTALL, INSTALL),  # asked again: nothing to add
        ([], "and on Windows?", "and on Windows?"),
    ],
)
def test_a_follow_up_is_read_with_the_questions_back_to_the_one_that_set_the_topic(history, question, query) -> None:
    assert conversation_query(question, history) == query


def test_an_embedded_follow_up_of_a_follow_up_keeps_the_topic(settings) -> None:
    p = pipeline(settings, [chunk(ZH_MEMORY)], [0.9], backend="embedded")
    p.ask("那磁盘呢？", history=turns("小部件需要几个处理器核心？", "那内存呢？"))
    assert p.retriever.asked[0] == "那磁盘呢？"
    assert "内存" in p.retriever.asked[1] and "处理器" in p.retriever.asked[1]


@dataclass
class KeyedEvaluator(Evaluator):
    """Grades high only a question that holds ``word``: the passages answer the question they were found for."""

    word: str
    name: str = "keyed"

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        return Grading([Grade(0.9 if self.word in question else -0.95, Method.SIMILARITY) for _ in texts])


@pytest.mark.parametrize(
    ("question", "action", "follow_up"),
    [
        ("How much memory does it need?", Action.CORRECT, True),
        ("And what is the capital of Australia?", Action.INCORRECT, False),
    ],
)
def test_a_new_question_is_not_answered_with_the_words_of_the_one_before(settings, question, action, follow_up) -> None:
    """Read with the previous question's words, the widget manual matches any question; only a follow-up whose
    own words the passage names ("memory") is answered from it. A new topic, though it opens as a follow-up does,
    gets "not in your documents"."""
    p = pipeline(settings, [chunk(DOC)], [], evaluator=KeyedEvaluator("processor"), backend="embedded")
    history = [("user", "How many processor cores does the widget need?"), ("assistant", "“…two…” [1]")]
    answer = p.ask(question, history=history, web=False)
    assert answer.action is action
    assert ("eight hundred megabytes" in answer.text) is follow_up
    assert any("a new question, not a follow-up" in note for note in answer.trace.notes) is not follow_up


@dataclass
class FollowUpEvaluator(Evaluator):
    """A changelog line that names Windows matches "And on Windows?" alone a little better than the passage on
    running R in batch mode under Windows does; read with the question before it, only that passage matches."""

    name: str = "follow-up"

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        def one(text: str) -> float:
            if "Windows" in text and "batch" in text:
                return 0.95 if "batch" in question else 0.4
            return 0.7 if "Windows" in text and "batch" not in question else -0.9

        return Grading([Grade(one(t), Method.SIMILARITY) for t in texts])


def test_a_follow_up_answered_alone_by_any_page_that_names_its_word_is_read_with_the_conversation(settings) -> None:
    """Graded on "Windows" alone, "and on Windows?" after a question on batch mode is Correct on a changelog line
    that names Windows: read with the conversation, the passage on batch mode under Windows answers it."""
    changelog = chunk("Version 2.1 fixed the sudo command on Windows 10.", file="guide.pdf", n=0)
    batch = chunk("On Windows, run a file of R commands in batch mode with Rterm.exe.", file="R-intro.pdf", n=1)
    p = pipeline(settings, [changelog, batch], [], evaluator=FollowUpEvaluator(), backend="embedded")
    history = [("user", "How do I run R in batch mode?"), ("assistant", "“Use R CMD BATCH.” [1]")]
    answer = p.ask("And on Windows?", history=history, web=False)
    assert answer.action is Action.CORRECT
    assert "Rterm.exe" in answer.text and "sudo" not in answer.text
    assert "a follow-up: read with the words of the question it follows" in answer.trace.notes


@pytest.mark.parametrize(
    ("question", "goes_on"),
    [
        ("And on Windows?", True),
        ("what about macOS?", True),
        ("那行距呢？", True),
        ("还有别的办法吗？", True),
        ("How do I run R in batch mode?", False),
        ("Andrew's package fails to build. Why?", False),
        ("怎么用 tlmgr 更新所有宏包？", False),
    ],
)
def test_a_question_that_goes_on_from_the_one_before_is_told_by_how_it_opens(question: str, goes_on: bool) -> None:
    from crag.followups import elliptical

    assert elliptical(question) is goes_on


@pytest.mark.parametrize(
    ("question", "passage", "adds"),
    [
        ("那行距呢？", "37 如何设置双倍或者更大的行间距？使用命令\\renewcommand", True),
        ("And on Windows?", "On Windows, use the installer.", True),
        ("Why?", "Anything at all.", True),
        ("Can you explain that in more detail?", "The widget needs two cores.", True),
        ("具体怎么做？还有其他例子吗？", "The widget needs two cores.", True),
        ("还有别的办法吗？", "The widget needs two cores.", True),
        ("What is the capital of Australia?", "使用 graphicx 宏包插入图形。", False),
        ("怎么做红烧肉？", "Function read.spss reads SPSS files.", False),
    ],
)
def test_a_follow_up_is_one_whose_own_words_the_passage_names(question: str, passage: str, adds: bool) -> None:
    from crag.followups import adds_to

    assert adds_to(question, passage) is adds


@pytest.mark.parametrize(
    ("rewrite", "why"),
    [("1.1.1.1.1.1.1.1.1.1", "repeats itself"), ("", ""), ("What is the weather in Paris?", "shares no word")],
)
def test_a_junk_rewrite_is_rejected_and_the_question_used_as_asked(settings, rewrite: str, why: str) -> None:
    model = ScriptedModel(answer="It needs 800 MB [1].", structured={"Standalone": {"question": rewrite}})
    p = pipeline(settings, [chunk(DOC)], [0.9], model)
    answer = p.ask("And memory?", history=[("user", "How many cores does the widget need?"), ("assistant", "Two.")])
    assert p.retriever.asked[0] == "And memory?"
    assert answer.trace.standalone_question.startswith("And memory?")
    if why:
        assert any("was rejected" in note and why in note and "used as asked" in note for note in answer.trace.notes)


def test_rewrite_problems() -> None:
    from crag.followups import rewrite_problem

    history = [("user", "How do I install R on Linux?")]
    assert rewrite_problem("How do I install R on Windows?", "And on Windows?", history) == ""
    assert rewrite_problem("怎么在 Windows 上安装 R？", "那 Windows 呢？", history) == ""
    assert rewrite_problem("!!! ???", "And on Windows?", history) == "it has no words"
    assert rewrite_problem("the the the the the the the", "And on Windows?", history) == "it repeats itself"


def test_a_new_question_after_a_conversation_is_read_as_asked(settings) -> None:
    """The conversation's words only help a question that is not answered on its own."""
    p = pipeline(settings, [chunk(ZH_MEMORY), chunk(DOC, n=1)], [], backend="embedded", evaluator=None)
    p.evaluators["similarity"] = p.scorer
    history = [("user", "How many processor cores does the widget need?"), ("assistant", "“Two.” [1]")]
    answer = p.ask("小部件需要几个处理器核心？", history=history)
    assert answer.action is Action.CORRECT
    assert answer.trace.standalone_question == "小部件需要几个处理器核心？"
    assert "小部件需要两个处理器核心" in answer.text


@dataclass
class TwoReadingsEvaluator(Evaluator):
    """Alone, "那怎么删除呢？" matches the passage on removing; read with the question before it, the passage on
    installing matches better."""

    name: str = "two-readings"

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        def one(text: str) -> float:
            if "remove" in text:
                return 0.3 if "安装" in question else 0.8
            return 0.9 if "安装" in question else -0.5

        return Grading([Grade(one(t), Method.SIMILARITY) for t in texts])


def test_a_follow_up_that_goes_on_is_graded_on_what_it_adds_as_well_as_on_what_it_follows(settings) -> None:
    install = chunk("tlmgr install 安装单个宏包。", n=0)
    remove = chunk("tlmgr remove 删除一个宏包。", n=1)
    p = pipeline(settings, [install, remove], [], evaluator=TwoReadingsEvaluator(), backend="embedded")
    history = [("user", "tlmgr 怎么安装单个宏包？"), ("assistant", "“tlmgr install 安装单个宏包。” [1]")]
    answer = p.ask("那怎么删除呢？", history=history, web=False)
    assert answer.action is Action.CORRECT
    assert "tlmgr remove" in answer.text
    assert [round(g.score, 2) for g in answer.trace.retrieved] == [0.2, 0.55]


@dataclass
class PassageEvaluator(Evaluator):
    """Grades a passage by what it holds, whatever the question: ``grades`` maps a word of it to its grade."""

    grades: dict[str, float]
    name: str = "by passage"

    def grade(self, question: str, texts: Sequence[str], usage: RunUsage | None = None) -> Grading:
        return Grading([Grade(next(g for w, g in self.grades.items() if w in t), Method.SIMILARITY) for t in texts])


def test_a_name_found_only_with_the_words_of_the_question_before_does_not_vouch_for_a_passage(settings) -> None:
    """After "How do I run R in batch mode?", "那 R 里怎么删除所有的对象？" is not Correct on a tlmgr page
    about deleting backups, which never says R, though the words of the question before find passages on R. The
    question's own names must be in what its own words find."""
    on_r = chunk("Use rm(list = ls()) in R to remove every object.", file="r.pdf", n=0)
    backups = chunk("删除备份目录中的所有旧备份。", file="tlmgr.pdf", n=1)
    evaluator = PassageEvaluator({"rm(": -0.9, "备份": 0.9})
    p = pipeline(settings, [on_r, backups], [0.0, 0.0], evaluator=evaluator, backend="embedded")
    question = "那 R 里怎么删除所有的对象？"
    p.retriever.retrieve = lambda q, k, mode="hybrid", scope=None: (
        [ScoredChunk(chunk=backups, score=1.0)]
        if q == question
        else [
            ScoredChunk(chunk=on_r, score=1.0),
            ScoredChunk(chunk=backups, score=0.5),
        ]
    )
    answer = p.ask(question, history=[("user", "How do I run R in batch mode?"), ("assistant", "“R CMD BATCH” [1]")])
    assert answer.action is not Action.CORRECT and answer.trace.terms.missing == ("R",)
    assert {h.chunk.file: h.from_history for h in answer.trace.retrieved} == {"r.pdf": True, "tlmgr.pdf": False}


@pytest.mark.parametrize("backend", ["embedded", "ollama"])
def test_a_question_that_stands_alone_is_searched_and_answered_as_asked(settings, backend) -> None:
    """Two unrelated questions in a row are two questions: the second is searched with its own words only, never
    fused with the one before, and no model is asked to rewrite it."""
    p = pipeline(settings, [chunk(DOC)], [], evaluator=KeyedEvaluator("processor"), backend=backend)
    searched: list[str] = []
    retrieve = p.retriever.retrieve
    p.retriever.retrieve = lambda q, *args, **kwargs: searched.append(q) or retrieve(q, *args, **kwargs)
    history = [("user", "How many processor cores does the widget need?"), ("assistant", "“…two…” [1]")]
    answer = p.ask("What is the capital of Australia?", history=history, web=False)
    assert searched == ["What is the capital of Australia?"]
    assert answer.trace.standalone_question == "What is the capital of Australia?"
    # No rewrite: offline no model is asked at all; with one, only to read the question as asked.
    assert answer.trace.llm_calls_before_answer == (0 if backend == "embedded" else 1)
    assert not any("follow-up" in n for n in answer.trace.notes)
    assert all(not e.ask or e.ask == "What is the capital of Australia?" for e in answer.trace.expansions)


@pytest.mark.parametrize(
    ("question", "alone"),
    [
        ("What is the capital of Australia?", True),
        ("Is it possible to install R without root?", True),  # "it" that stands for nothing
        ("Is there a command that lists packages?", True),  # "that" after a noun
        ("What is gnuplot?", True),
        ("小部件需要几个处理器核心？", True),
        ("How much memory does it need?", False),
        ("Is it safe?", False),
        ("How do I undo that?", False),
        ("What does this option do?", False),
        ("Windows?", False),
        ("On a Mac?", False),
        ("And on Windows?", False),
        ("Tell me more", False),
        ("它支持 Windows 吗？", False),
        ("那内存呢？", False),
        ("怎么卸载？", False),
    ],
)
def test_a_question_stands_alone_unless_it_points_back_goes_on_or_is_a_fragment(question, alone) -> None:
    assert stands_alone(question) is alone
