"""Corrective-RAG knowledge-base chat: the core, free of any UI."""

import threading

__version__ = "0.1.0"

# Two threads importing pydantic-ai for the first time at once (the app loads its models while a build starts) can
# meet inside its circular imports, and Python then gives one of them a half-made module: an ImportError. A thread
# that may be the first to import the core's heavy modules does it holding this lock.
first_imports = threading.RLock()
