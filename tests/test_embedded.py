"""The embedded chat backend for real: llama.cpp with the packaged GGUF (the embedder: test_use_embedder.py)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput

from crag.models import (
    PACKAGED_GGUF,
    embedded_chat,
    embedded_chat_model,
    embedded_label,
    llama_cpp_model,
)
from crag.parts import Written
from crag.support import Grounder
from crag.text import content_words, split_sentences
from crag.types import AnswerKind, cited
from tests.apiclient import DOC, QUESTION
from tests.fakes import chunk, pipeline
from tests.helpers import streamed_text

pytestmark = pytest.mark.integration


class Grade(BaseModel):
    # No numeric bounds: llama.cpp's grammar does not enforce them (a score of 1e15 parses), so the CRAG grader clamps.
    relevant: bool
    reason: str


def test_structured_call_parses(settings, real_models) -> None:
    model = embedded_chat_model(settings)
    agent = Agent(model, output_type=NativeOutput(Grade), instructions="Grade whether the text answers the question.")
    result = agent.run_sync("Question: What is the capital of France?\nText: Paris is the capital of France.")
    assert isinstance(result.output, Grade)
    assert result.usage.requests == 1 and result.usage.input_tokens > 0


def test_generation_streams_token_by_token(settings, real_models) -> None:
    agent = Agent(embedded_chat_model(settings), instructions="Answer briefly.")
    with agent.run_stream_sync("Name three colours.", model_settings={"max_tokens": 40}) as result:
        deltas = list(result.stream_text(delta=True, debounce_by=None))
    assert len(deltas) >= 3, deltas
    assert "".join(deltas).strip()


def test_a_stopped_answer_releases_the_model_for_the_next_question(settings, real_models, monkeypatch) -> None:
    """The Stop button, a closed tab, a dropped connection: an answer left after its first tokens must not
    keep llama.cpp locked, or the next question waits forever."""
    # Each token let through as it comes: a sentence held until whole may be the model's last, and the stop then
    # comes after the model's stream ended.
    monkeypatch.setattr(Grounder, "feed", lambda self, delta: [Written(text=delta)] if delta else [])
    settings = settings.model_copy(update={"max_answer_tokens": 48, "model_search": False})  # of stopping alone
    chat = embedded_chat(settings)
    p = replace(pipeline(settings, [chunk(DOC)], [0.9]), model=llama_cpp_model(chat, chat.name))
    stream = p.stream(QUESTION)
    for k, _ in enumerate(stream):
        if k == 1:
            break  # the iterator is dropped: the model's stream ends here
    assert stream.answer is None and not chat._lock.locked()
    with p.stream(QUESTION) as stream:  # the Stop button with the iterator still held
        next(iter(stream))
        stream.close()
        assert not chat._lock.locked()
    answer = p.ask(QUESTION)  # asked again: answered
    assert answer.complete and answer.text


def test_a_generated_answer_reports_the_tokens_llama_cpp_counted(settings, real_models) -> None:
    """Not PydanticAI's estimate for a streamed function model: 50 tokens in, whatever the prompt."""
    settings = settings.model_copy(update={"max_answer_tokens": 24, "model_search": False})
    chat = embedded_chat(settings)
    p = replace(pipeline(settings, [chunk(DOC)], [0.9]), model=llama_cpp_model(chat, chat.name))
    before = (chat.prompt_tokens, chat.completion_tokens)
    trace = p.ask(QUESTION).trace
    assert (trace.input_tokens, trace.output_tokens) == (
        chat.prompt_tokens - before[0],
        chat.completion_tokens - before[1],
    )
    assert trace.input_tokens > 100 and trace.output_tokens > 0  # the instructions and the passage were read


def test_unit_tests_cannot_reach_the_real_model(settings) -> None:
    """Without the `real_models` opt-in the embedded model refuses, like every real model."""
    with pytest.raises(RuntimeError, match="ALLOW_MODEL_REQUESTS"):
        Agent(embedded_chat_model(settings)).run_sync("hi")


def test_a_gguf_named_by_the_setting_writes_an_answer_held_to_its_sources(settings, real_models, tmp_path) -> None:
    """``CRAG_EMBEDDED_GGUF``: any instruct GGUF the user has (here a copy of the packaged one, renamed). What the model
    writes reaches the user only as sentences a source backs, each citing it; else the sources are quoted."""
    package, name = PACKAGED_GGUF
    own = tmp_path / "my-model.gguf"
    shutil.copyfile(Path(str(resources.files(package).joinpath(name))), own)
    settings = settings.model_copy(update={"embedded_gguf": own, "max_answer_tokens": 64, "answer_mode": "generated"})
    chat = embedded_chat(settings)
    assert chat.name == "my-model" and embedded_label(settings) == "my-model.gguf"
    p = replace(pipeline(settings, [chunk(DOC)], [0.9], backend="embedded"), model=llama_cpp_model(chat, chat.name))
    with p.stream(QUESTION) as stream:
        text = streamed_text(stream)
    answer = stream.answer
    assert answer.text == text.strip() and answer.text
    if answer.kind is AnswerKind.GENERATED:
        sentences = [s for s in split_sentences(answer.text) if content_words(s)]
        assert all(cited(s) == {1} for s in sentences), answer.text
    else:
        assert answer.kind is AnswerKind.EVIDENCE and "“" in answer.text
        assert any("the sources are quoted instead" in note for note in answer.trace.notes)
