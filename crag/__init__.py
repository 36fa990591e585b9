"""Corrective-RAG knowledge-base chat: the core, free of any UI."""

__version__ = "0.1.0"
