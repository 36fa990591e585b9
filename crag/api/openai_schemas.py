"""The OpenAI chat-completions format, as far as this server speaks it (pydantic at the edge only).

Fields that would change what a reply is (tools, several choices, JSON output, logprobs, audio) are typed here
so the route can refuse them with a message; sampling knobs (temperature, max_tokens...) and fields this server
does not know are kept as extras, and the route notes them as ignored. Responses are modelled for the docs only:
the route writes them as plain JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crag.contract import CitationOut

# The knowledge base as models. The value is the web-search override: None keeps CRAG_WEB_SEARCH.
MODELS: dict[str, bool | None] = {"crag-kb": None, "crag-kb-noweb": False}
MODEL_DESCRIPTIONS = {
    "crag-kb": "Your PDFs with Corrective RAG; searches the web when they fall short, if CRAG_WEB_SEARCH allows.",
    "crag-kb-noweb": "Your PDFs with Corrective RAG, never the web.",
}

# Transport bounds only: a chat client sends the whole conversation, and the pipeline cuts what it uses.
MAX_CONTENT = 100_000  # characters of one message or part
MAX_MESSAGES = 1_000
MAX_PARTS = 100


class _Open(BaseModel):
    # OpenAI's format grows every few months and clients send what they know: keep unknown fields, note them.
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: str = Field(
        max_length=64,
        description="`text`. Other parts (`image_url`, `input_audio`, `file`) are refused in the question and "
        "dropped, with a note, from earlier messages: the knowledge base reads text.",
    )
    text: str | None = Field(None, max_length=MAX_CONTENT)


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        description="The last message must be `user`: it is the question. Earlier user and assistant messages are "
        "the history. System and developer messages are not used (the knowledge base answers with its own "
        "instructions) and a note says so; tool and function messages are refused."
    )
    content: (
        Annotated[str, Field(max_length=MAX_CONTENT)] | Annotated[list[ContentPart], Field(max_length=MAX_PARTS)] | None
    ) = None
    name: str | None = Field(None, max_length=256)
    tool_calls: list[dict[str, Any]] | None = Field(None, max_length=MAX_PARTS, description="Refused.")
    function_call: dict[str, Any] | None = Field(None, description="Refused.")


class StreamOptions(_Open):
    include_usage: bool | None = Field(None, description="Send a last chunk with `usage` and no choices.")


class ChatRequest(_Open):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "model": "crag-kb",
                    "messages": [
                        {"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "How do I install it?"},
                        {"role": "assistant", "content": "Run the installer [1]."},
                        {"role": "user", "content": "And on Windows?"},
                    ],
                    "stream": True,
                }
            ]
        },
    )

    # The schema lists the models so that a fuzzer reaches the pipeline; any other name is a 404, as at OpenAI.
    model: str = Field(
        max_length=256,
        json_schema_extra={"enum": list(MODELS)},
        description="`crag-kb`, or `crag-kb-noweb` for documents only; `crag-kb/<folder>` and `crag-kb-noweb/<folder>` "
        "ask one knowledge base (a folder of the files folder). GET /v1/models lists them.",
    )
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool | None = Field(
        None, description="Server-Sent Events: `data: {chunk}` lines, then `data: [DONE]`, as OpenAI sends them."
    )
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, description="1, or leave it out: one answer per question.")
    tools: list[dict[str, Any]] | None = Field(None, max_length=MAX_PARTS, description="Refused unless empty.")
    tool_choice: str | dict[str, Any] | None = Field(None, description="`none` or `auto` only.")
    functions: list[dict[str, Any]] | None = Field(None, max_length=MAX_PARTS, description="Refused unless empty.")
    function_call: str | dict[str, Any] | None = Field(None, description="`none` or `auto` only.")
    response_format: dict[str, Any] | None = Field(None, description='`{"type": "text"}` only.')
    logprobs: bool | None = Field(None, description="Refused when true.")
    top_logprobs: int | None = Field(None, description="Refused unless 0.")
    modalities: list[str] | None = Field(None, max_length=8, description='`["text"]` only.')
    audio: dict[str, Any] | None = Field(None, description="Refused.")


# ---------------------------------------------------------------------------------------------
# Responses, for the docs


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    description: str = Field(description="An extra field: what the model answers from.")


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class Usage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the chat model read for this answer, all its calls together.")
    completion_tokens: int = Field(description="Tokens it wrote. Both are 0 when no model wrote (evidence answers).")
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str = Field(description="The answer with its [n] citations, then a Markdown list of the sources.")
    refusal: None = None
    citations: list[CitationOut] = Field(
        description="An extra field: the sources the answer cites, each with its file and pages (or URL) and what "
        'the answer took from it. Streamed, it comes in the delta of the chunk with `finish_reason: "stop"`. '
        "OpenAI clients ignore it."
    )


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: Literal["stop"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[Choice]
    usage: Usage
    crag: dict[str, Any] = Field(
        description="How the answer was made: the JSON of `POST /ask` (action, scores, web query, sources with "
        "their pages), each source with `boxes` (page and PDF box, points from the top left), and notes on "
        "what of the request was not used. OpenAI clients ignore it."
    )


class OpenAIErrorDetail(BaseModel):
    message: str = Field(description="What went wrong and what to do about it.")
    type: str = Field(description="invalid_request_error | server_error")
    param: str | None
    code: str | None = Field(
        description="e.g. invalid_request, invalid_question, unsupported_parameter, unsupported_content, "
        "model_not_found, invalid_api_key, rebuild_needed, backend_unavailable, answer_incomplete"
    )
    crag: dict[str, Any] | None = Field(
        None, description="With answer_incomplete: the answer so far and its trace, as in a completion."
    )


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail
