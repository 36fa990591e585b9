"""Retrieval benchmark: a fixed corpus of public PDFs (English and Chinese) and questions about them."""
