"""A core error names its remedy as a kind; each edge says it in its own words: the page its sidebar, the command
line its command, the HTTP API its endpoint, MCP the app and the command beside it."""

from __future__ import annotations

import pytest

from crag import cli
from crag.api.http import error_message
from crag.errors import CragError, Remedy, said
from crag.mcp.outputs import REMEDIES as MCP
from crag.scope import unknown_scope
from crag.store.common import RebuildNeeded
from ui.text import REMEDIES_ZH, error_text, remedy_text


def test_the_same_error_is_told_its_remedy_in_each_edges_words() -> None:
    exc = unknown_scope(["manuals"], [])
    assert exc.remedy is Remedy.BUILD
    fact = str(exc)
    assert "nothing is indexed yet" in fact and "python -m crag" not in fact and "sidebar" not in fact
    on_the_page = error_text(exc)
    on_the_command_line = said(fact, exc.remedy, cli.REMEDIES)
    over_http = error_message(exc)
    over_mcp = said(fact, exc.remedy, MCP)
    assert len({on_the_page, on_the_command_line, over_http, over_mcp}) == 4
    assert all(told.startswith(fact) for told in (on_the_page, on_the_command_line, over_http, over_mcp))
    assert "**Rebuild knowledge base** in the sidebar" in on_the_page
    assert on_the_command_line.endswith("`python -m crag index`.")
    assert over_http.endswith("POST /index.")


@pytest.mark.parametrize(
    ("edge", "words"),
    [
        (lambda exc: error_text(exc), "**Full rebuild** on"),
        (lambda exc: said(str(exc), exc.remedy, cli.REMEDIES), "`python -m crag index --rebuild`"),
        (lambda exc: error_message(exc), 'POST /index with {"rebuild": true}'),
    ],
)
def test_a_full_rebuild_is_said_as_each_edge_does_it(edge, words: str) -> None:
    exc = RebuildNeeded(
        "The index was built with embeddings from a, but the app now uses b.", remedy=Remedy.FULL_REBUILD
    )
    assert edge(exc) == f"{exc} {edge(exc).removeprefix(f'{exc} ')}" and words in edge(exc)


def test_an_error_without_a_remedy_is_told_as_it_is() -> None:
    exc = CragError("The question is only punctuation: ask it in words.")
    assert error_text(exc) == error_message(exc) == said(str(exc), exc.remedy, cli.REMEDIES) == str(exc)


def test_the_page_says_the_remedy_of_an_answer_in_the_questions_language() -> None:
    assert remedy_text(Remedy.BUILD, "How many cores?") == "Build it: **Rebuild knowledge base** in the sidebar."
    assert remedy_text(Remedy.BUILD, "它需要几个核心？") == REMEDIES_ZH[Remedy.BUILD]
