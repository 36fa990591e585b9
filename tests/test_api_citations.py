"""The cited sources in an extra field of the /v1 message, read by the official ``openai`` client over real HTTP.

A client that shows citations apart from the text reads ``message.citations`` (``delta.citations`` on the last
chunk of a stream): each cited source with its file and pages, or URL, and what the answer took from it.
"""

from __future__ import annotations

from crag.config import Settings
from crag.types import WebResult, cited
from tests.apiclient import DOC
from tests.fakes import FakeSearcher, ScriptedModel, chunk, pipeline
from tests.test_api_openai import ask, kb

OTHER = "The gadget weighs three kilograms and runs on batteries."


def test_a_plain_answer_carries_only_the_sources_it_cites(settings: Settings) -> None:
    fake = pipeline(
        settings,
        [chunk(DOC, page=3, n=0), chunk(OTHER, file="gadget.pdf", page=7, n=1)],
        [0.9, 0.0],
        ScriptedModel(answer="It needs eight hundred megabytes [1]."),
    )
    with kb(settings, fake) as client:
        completion = ask(client)
    message = completion.choices[0].message
    given = completion.model_extra["crag"]["sources"]
    assert len(given) == 2
    # What the text cites (the model's sentence and the quote under it), not the gadget's source it was given too.
    text = message.content.split("**Sources**")[0]
    citations = message.model_extra["citations"]
    assert [c["n"] for c in citations] == sorted(cited(text)) == [1]
    [manual] = [c for c in citations if c["file"] == "manual.pdf"]
    assert (manual["n"], manual["kind"], manual["pages"]) == (1, "local", [3])
    assert manual["section"] == "Intro" and manual["url"] is None
    assert "eight hundred megabytes" in manual["quote"]
    assert text.startswith("It needs eight hundred megabytes [1].")


def test_an_evidence_answer_cites_the_sentences_it_quotes(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC, page=2)], [0.9], backend="embedded")
    with kb(settings, fake) as client:
        message = ask(client).choices[0].message
    [cited] = message.model_extra["citations"]
    assert cited["pages"] == [2] and cited["quote"] in message.content
    assert "eight hundred megabytes" in cited["quote"] and "“" not in cited["quote"]


def test_a_streamed_answer_carries_them_on_its_last_chunk(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC, page=4)], [0.9], ScriptedModel(answer="Eight hundred megabytes [1]."))
    with kb(settings, fake) as client:
        chunks = [c for c in ask(client, stream=True) if c.choices]
        plain = ask(client).choices[0].message.model_extra["citations"]
    last = chunks[-1].choices[0]
    assert last.finish_reason == "stop" and last.delta.model_extra["citations"] == plain
    assert plain[0]["file"] == "manual.pdf" and plain[0]["pages"] == [4]
    assert all("citations" not in (c.choices[0].delta.model_extra or {}) for c in chunks[:-1])


def test_a_web_source_is_cited_by_its_url(settings: Settings) -> None:
    page = WebResult("Widget FAQ", "https://example.org/faq", "The widget needs 800 MB.", "The widget needs 800 MB.")
    fake = pipeline(
        settings,
        [chunk(OTHER)],
        [-0.9],
        ScriptedModel(answer="It needs 800 MB [1]."),
        searcher=FakeSearcher([page]),
    )
    with kb(settings, fake) as client:
        message = ask(client).choices[0].message
    [cited] = message.model_extra["citations"]
    assert (cited["kind"], cited["url"], cited["title"], cited["file"]) == (
        "web",
        "https://example.org/faq",
        "Widget FAQ",
        None,
    )


def test_an_answer_that_cites_nothing_cites_what_the_app_found_for_it(settings: Settings) -> None:
    fake = pipeline(settings, [chunk(DOC)], [0.9], ScriptedModel(answer="Plenty of memory."))
    with kb(settings, fake) as client:
        message = ask(client).choices[0].message
    assert message.content.startswith("Plenty of memory [1].")
    assert [c["n"] for c in message.model_extra["citations"]] == [1]
