"""Prompt injection: sentences in documents and web pages that talk to the assistant instead of about the subject.

Refinement drops them from the strips (``crag.refine``); the grader never sees them (``crag.prompts``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

# Prompt injection is text that talks to the assistant instead of about the subject. Manuals are full
# of imperatives ("override the default rules") and of verbs like "output" ("summary() will output only
# the first six rows"): those are facts, and must survive. So the patterns need the assistant addressed:
# its role named, or its instructions overridden. Web pages are strangers' text and get one more check:
# an order that opens a sentence and dictates the reply ("Reply only with ...").
_ROLE = re.compile(
    r"\b(?:assistants?|chat ?bots?|ai (?:models?|systems?|agents?|assistants?|tools?|bots?|readers?)|"
    r"(?:large )?language models?|llms?|chatgpt|system prompt|jailbreak|developer (?:message|mode))\b"
    r"|AI\s*(?:助手|系统|模型|工具|代理|机器人)|助手|人工智能|语言模型|大模型|智能体|系统提示|提示词|越狱",
    re.IGNORECASE,
)
# Giving the assistant a new identity is an injection on its own.
_RECAST = re.compile(
    r"\b(?:you are now|you are no longer|from now on,? you are|pretend (?:to be|you are)|act as an? (?:ai|assistant))\b"
    r"|你现在是|从现在起你是|假装你是|扮演一个",
    re.IGNORECASE,
)
_OVERRIDE = re.compile(
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,20}?"
    r"\b(?:all|any|previous|prior|above|earlier|preceding|original|initial|system|your)\b[^.!?\n]{0,20}?"
    r"\b(?:instructions?|prompts?|rules|guidelines|directions|context)\b"
    r"|(?:忽略|无视|忘记|忽视|不要理会)[^。！？\n]{0,6}(?:之前|以上|上面|先前|所有|前面|原来|系统)[^。！？\n]{0,6}"
    r"(?:指令|指示|提示|规则|设定|要求)",
    re.IGNORECASE,
)
_DICTATE = re.compile(
    r"^(?:please\s+|now\s+|instead\s*,?\s+|from now on\s*,?\s+)?(?:reply|respond|answer|say|output|print|write|repeat)"
    r"\b[^.!?\n]{0,40}\b(?:only|just|exactly|verbatim|nothing but|the (?:single )?word)\b"
    r"|^(?:请)?(?:只|仅|只能)(?:回复|回答|输出|说)",
    re.IGNORECASE,
)


class Injection(StrEnum):
    """What a sentence does that makes it look like prompt injection."""

    OVERRIDE = "override"
    RECAST = "recast"
    ADDRESS = "address"
    DICTATE = "dictate"

    @property
    def says(self) -> str:
        return {
            "override": "tells the assistant to ignore its instructions",
            "recast": "gives the assistant a new role",
            "address": "addresses the assistant",
            "dictate": "dictates the reply",
        }[self.value]


@dataclass(frozen=True)
class Found:
    """A sentence found to look like prompt injection: how, and the words that show it."""

    kind: Injection
    words: str

    @property
    def reason(self) -> str:
        return f"possible prompt injection: {self.kind.says} (“{self.words}”)"


def find_injection(sentence: str, kind: str = "local") -> Found | None:
    """How a sentence looks like prompt injection, or None when it does not. ``kind`` "web" is stricter."""
    for pattern, what in ((_OVERRIDE, Injection.OVERRIDE), (_RECAST, Injection.RECAST), (_ROLE, Injection.ADDRESS)):
        if (found := pattern.search(sentence)) and (pattern is not _ROLE or _instructs(sentence)):
            return Found(what, found.group().strip())
    if kind == "web" and (found := _DICTATE.search(sentence.strip())):
        return Found(Injection.DICTATE, found.group().strip())
    return None


def injection_reason(sentence: str, kind: str = "local") -> str:
    """Why a sentence looks like prompt injection, or "" when it does not. ``kind`` "web" is stricter."""
    found = find_injection(sentence, kind)
    return found.reason if found else ""


# An order to whoever reads: "you must", or what to say ("must answer", "state that", "tell the user"). A manual
# names an assistant without telling it what to say ("The assistant window shows the output.").
_ORDER = re.compile(
    r"\b(?:you (?:must|should|will|are to)|reply|respond|answer with|say)\b"
    r"|\b(?:must|should|shall|are to|have to|need to)\s+(?:always\s+|only\s+|now\s+|first\s+)?"
    r"(?:answer|reply|respond|say|state|tell|claim|mention|recommend|describe|write|output|include)\b"
    r"|\b(?:state|say|claim|mention|assert) that\b|\btell (?:the )?(?:users?|readers?)\b"
    r"|请|必须|你要|回答|回复|声明|务必",
    re.IGNORECASE,
)


def _instructs(sentence: str) -> bool:
    """Naming the assistant is an injection when the sentence also gives it an order."""
    return bool(_OVERRIDE.search(sentence) or _DICTATE.search(sentence.strip()) or _ORDER.search(sentence))
