"""Plain data that flows between the core and its edges (CLI, UI, API)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One answer and how it was made."""

    text: str
    backend: str
    model: str
    complete: bool = True
    error: str = ""
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    timings: dict[str, float] = field(default_factory=dict)
