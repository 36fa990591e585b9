"""The event loop of PydanticAI's synchronous calls, closed when a process or a thread is done with it.

``Agent.run_sync`` and ``Agent.run_stream_sync`` run on the calling thread's current event loop, made on
first use and never closed by PydanticAI. A streamed run that is not closed (no ``with``, a model that
failed mid-answer) stays parked on that loop with the AnyIO worker thread its model reads tokens from;
that thread is not a daemon, so the interpreter waits for it after the last line (``threading._shutdown``).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


def close_event_loop() -> None:
    """Cancel what is left on this thread's event loop (open streamed runs end, and their worker threads
    with them), then close it. A later synchronous call makes a new one.

    Call it where the thread owns its loop: last thing in the CLI, at the end of a thread this program
    started. Never on Streamlit's script thread, whose loop belongs to the session."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:  # a thread that never made one
            return
    if loop.is_running() or loop.is_closed():
        return
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:  # a worker thread finishes the call it is in (a token), then its task ends
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
        asyncio.set_event_loop(None)


@contextmanager
def own_event_loop() -> Iterator[None]:
    """A new event loop for this thread while the block runs, closed after it; the loop before is put back.

    Streamlit gives every script run of a session one loop. A run stopped by a new question goes on, on its own
    thread, until its next call into Streamlit: when it is waiting for the model's next token, it holds that loop
    running, and the next answer's first model call would fail on it ("This event loop is already running")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            before = asyncio.get_event_loop()
        except RuntimeError:  # a thread that never made one
            before = None
    asyncio.set_event_loop(asyncio.new_event_loop())
    try:
        yield
    finally:
        close_event_loop()
        asyncio.set_event_loop(before)
