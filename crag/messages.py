"""What the user is told when no model speaks: why there is no answer, why a model failed, why a near miss, and what
a written answer states that its sources do not."""

from __future__ import annotations

from collections.abc import Sequence

from crag.errors import CragError, Remedy
from crag.models import BackendInfo
from crag.parts import Note
from crag.steps import Knowledge
from crag.text import language
from crag.types import Action, TermCheck

HINT_FILES = 3  # files named in a hint; the rest are counted


def whose_documents(scope: Sequence[str], zh: bool, capital: bool = True) -> str:
    """Whose documents a message speaks of: the user's, or those of the scope the question was asked in
    ("The documents in `projects/alpha`")."""
    if not scope:
        return "你的文档" if zh else ("Your documents" if capital else "your documents")
    places = "、".join(f"`{p}`" for p in scope) if zh else _listed([f"`{p}`" for p in scope])
    if zh:
        return f"{places} 里的文档"
    return f"{'The' if capital else 'the'} documents in {places}"


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def no_answer_message(
    question: str,
    action: Action,
    terms: TermCheck,
    web_query: str,
    web_error: str,
    web_on: bool,
    indexed: bool = True,
    scope: Sequence[str] = (),
) -> str:
    """Why there is no answer, truthfully, in the question's language. No model is asked to improvise.
    ``indexed`` is False when nothing was retrieved at all: the knowledge base has nothing in it yet. ``scope``:
    the folders and files the question was asked in (none: every document)."""
    zh = language(question) == "zh"
    if not indexed:
        local = (
            "知识库里还没有已索引的文档：先构建它，或等待正在进行的构建完成。"
            if zh
            else "Your knowledge base has nothing indexed yet: build it, or wait for the build in progress to finish."
        )
    elif terms.unknown:
        local = never_mentioned(question, terms.unknown, scope)
    elif action is Action.INCORRECT:
        where = whose_documents(scope, zh, capital=False)
        local = f"{where}中没有找到答案。" if zh else f"I could not find this in {where}."
    else:
        where = whose_documents(scope, zh)
        local = (
            f"{where}中有相关段落，但没有一句足够贴近这个问题。"
            if zh
            else f"{where} have passages on this topic, but no sentence in them answers the question closely."
        )
    if not web_on:
        far = "网络搜索已关闭。" if zh else "Web search is off."
    elif web_error:
        far = f"网络搜索不可用：{web_error}。" if zh else f"Web search is unavailable: {web_error}."
    else:
        far = (
            f"网络搜索“{web_query}”也没有找到可用的信息。"
            if zh
            else f"A web search for “{web_query}” found nothing usable."
        )
    return f"{local} {far}" if not zh else local + far


def never_mentioned(question: str, terms: Sequence[str], scope: Sequence[str] = ()) -> str:
    """The question's terms that no form of which any passage (of the scope) holds, in the question's language."""
    if language(question) == "zh":
        return f"{whose_documents(scope, True)}中没有提到{_quoted(terms, '、')}。"
    return f"{whose_documents(scope, False)} never mention {_quoted(terms)}."


def what_is_missing(question: str, knowledge: Knowledge, web_on: bool, scope: Sequence[str]) -> Note | None:
    """Before quotes that may not answer: why there is no answer (Incorrect), or the question's terms the
    documents never mention (Ambiguous); None before quotes that answer."""
    if knowledge.action is Action.INCORRECT:
        return Note(text=no_answer(question, knowledge, web_on, scope))
    if knowledge.action is Action.AMBIGUOUS and knowledge.evaluation.terms.unknown:
        return Note(text=never_mentioned(question, knowledge.evaluation.terms.unknown, scope))
    return None


def no_answer(question: str, knowledge: Knowledge, web_on: bool, scope: Sequence[str]) -> str:
    """``no_answer_message`` for what the steps found."""
    evaluation, web = knowledge.evaluation, knowledge.web
    found = bool(evaluation.graded)
    return no_answer_message(question, knowledge.action, evaluation.terms, web.query, web.error, web_on, found, scope)


def remedy(knowledge: Knowledge) -> Remedy | None:
    """What the user must do before any answer: build the knowledge base, when nothing was retrieved at all
    (``no_answer_message`` then says that nothing is indexed)."""
    return None if knowledge.evaluation.graded else Remedy.BUILD


def model_failure_message(backend: BackendInfo, exc: Exception) -> str:
    if isinstance(exc, CragError):  # it says what to do itself: the embedded model not installed, with the command
        return str(exc)
    fix = (
        "check that Ollama is running (`ollama serve`) and ask again"
        if backend.name == "ollama"
        else "check the model server and ask again"
        if backend.name == "openai"
        else "ask again; if it keeps failing, restart the app"
    )
    return f"The model stopped before the answer was complete ({type(exc).__name__}: {exc}): {fix}."


def _quoted(terms: Sequence[str], separator: str = ", ") -> str:
    return separator.join(f"“{t}”" for t in terms)


def near_miss_note(terms: TermCheck, searched_again: Sequence[str] = (), scope: Sequence[str] = ()) -> str:
    """``searched_again``: the missing terms that a passage was then found for (``retriever.anchor``); ``scope``:
    where the question was asked."""
    where = whose_documents(scope, False, capital=False) if scope else "the documents"
    if terms.decisive:
        return f"{where} never mention {_quoted(terms.unknown)}: a near miss, so the action is Incorrect"
    if terms.unknown:
        return (
            f"{where} never mention {_quoted(terms.unknown)}, in any form; the passages match the rest of the "
            "question, so they are shown as the closest, not as an answer (at most Ambiguous)"
        )
    names = _quoted(terms.missing)
    if not searched_again:
        return f"none of the retrieved passages mentions {names}, so they cannot make the action Correct"
    found = "the passages found were" if len(searched_again) > 1 else "the passage found was"
    return (
        f"none of the passages found for the question mentions {names}, so they cannot make the action Correct; "
        f"searched again for {_quoted(searched_again)}: {found} added, and cannot either"
    )


def language_hint(question: str, files: dict[str, str]) -> str:
    """For an answer that is not Correct, when some documents are in the other language and the embedder is
    English-only (an index built with MiniLM): offline search matches words, so a Chinese question rarely finds an
    English passage. The way out is to ask in the documents' language, or a full rebuild with multilingual
    embeddings. ``files``: file -> ``zh``, ``en`` or ``mixed`` (a bilingual document answers either language, so it
    is not named)."""
    asked = language(question)
    other = sorted(file for file, lang in files.items() if lang not in (asked, "mixed"))
    if not other:
        return ""
    n, total, more = len(other), len(files), len(other) > HINT_FILES
    if asked == "zh":
        names = "、".join(other[:HINT_FILES]) + ("等" if more else "")
        share = "都" if n == total else f"中有 {n} 份"
        which = "你的文档是英文的" if total == 1 else f"你的 {total} 份文档{share}是英文的"
        return (
            f"提示：{which}（{names}）。如果答案可能在其中，请用英文提问：离线检索按词语匹配，中文问题很难找到英文段落。"
            "完整重建知识库（full rebuild）会改用多语言向量模型，之后即可跨语言检索。"
        )
    names = ", ".join(other[:HINT_FILES]) + (", …" if more else "")
    if total == 1:
        which = "Your document is in Chinese"
    elif n == total:
        which = f"All {total} of your documents are in Chinese"
    else:
        which = f"{n} of your {total} documents {'are' if n > 1 else 'is'} in Chinese"
    return (
        f"Tip: {which} ({names}). If the answer may be in {'them' if n > 1 else 'it'}, ask in Chinese: offline search "
        "matches words, so an English question rarely finds Chinese passages. A full rebuild of the knowledge base "
        "moves it to multilingual embeddings, which match across languages."
    )


def unsupported_message(question: str, stated: Sequence[str]) -> str:
    """Under an answer whose model stated names or numbers nothing it was given mentions, in the question's language:
    the sentences that stated them were cut, and the user is told why."""
    if not stated:
        return ""
    if language(question) == "zh":
        return f"模型的回答提到了资料里没有的{_quoted(stated, '、')}，可能是编造的：这些句子已删去。"
    return (
        f"The model's answer named {_quoted(stated)}, which no source given to it mentions: it may have invented "
        f"{'it' if len(stated) == 1 else 'them'}, so those sentences were cut."
    )
