"""Nothing outlives its question: no threads, event loops or model streams left behind, and no process kept
from exiting. Threads are counted before and after 100 questions, through the API and the app's path."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest

from crag.config import Settings
from crag.pipeline import Pipeline
from tests.apiclient import DOC, QUESTION, make_client, sse
from tests.fakes import ScriptedModel, chunk, pipeline

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = 100
SLACK = 2  # threads that may start once and stay: a pool's first worker, TestClient's portal


class ThreadedModel(ScriptedModel):
    """Reads its tokens off a worker thread, as the embedded model's adapter did and as network clients do
    for a DNS lookup; fails mid-answer for a question that says "fail", as a model server that hangs up.
    Records every stream that ended, however it ended."""

    def __init__(self) -> None:
        super().__init__(
            answer="It needs eight hundred megabytes [1].", structured={"Standalone": {"question": QUESTION}}
        )
        self.ended = 0

    async def _stream(self, messages, info):
        self._record(messages, info)
        words = iter(self.answer.split(" "))
        try:
            while (word := await anyio.to_thread.run_sync(next, words, None)) is not None:
                if "fail" in self.prompts[-1] and word == "eight":
                    raise RuntimeError("the model server hung up")
                yield word + " "
        finally:
            self.ended += 1


def settled_thread_count(limit: int) -> int:
    """The thread count once threads that are ending have ended: a stopped stream's thread finishes its
    current token first. Waits a while for the count to reach ``limit``, never forever."""
    deadline = time.monotonic() + 30
    while threading.active_count() > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return threading.active_count()


def fails(n: int) -> bool:
    return n % 7 == 3


def follows_up(n: int) -> bool:
    # A follow-up is rewritten by the model into a standalone question that would lose "fail".
    return n % 2 == 1 and not fails(n)


class Stop(BaseException):
    """What Streamlit raises inside the script when the user clicks Stop (a BaseException)."""


def app_question(p: Pipeline, n: int) -> None:
    """One question as ui/chat.py asks it, on a thread of its own as each Streamlit script run is: some
    stopped after the first tokens (the Stop button), some with a model failing mid-answer."""
    question = f"{QUESTION} fail" if fails(n) else QUESTION
    history = [("user", "How many cores?"), ("assistant", "Two [1].")] if follows_up(n) else []
    stream = p.stream(question, history=history)
    try:
        for k, _ in enumerate(stream):
            if n % 5 == 4 and k == 1:
                raise Stop
    except Stop:
        if n % 10 == 4:  # the page may close the stream, or just drop it
            stream.close()


def test_the_app_path_does_not_accumulate_threads(settings: Settings) -> None:
    model = ThreadedModel()
    p = pipeline(settings, [chunk(DOC)], [0.9], model)

    def script_run(n: int) -> None:
        thread = threading.Thread(target=app_question, args=(p, n), name=f"script-run-{n}")
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), "a question never ended"

    for n in range(5):  # warm up: whatever starts once (and stays) starts here
        script_run(n)
    before = settled_thread_count(threading.active_count())
    for n in range(QUESTIONS):
        script_run(n)
    after = settled_thread_count(before)
    print(f"\napp path: {before} threads before {QUESTIONS} questions, {after} after")
    assert after <= before + SLACK, sorted(t.name for t in threading.enumerate())
    assert model.ended == QUESTIONS + 5  # every model stream ended: finished, failed or stopped


def test_the_api_does_not_accumulate_threads(settings: Settings) -> None:
    model = ThreadedModel()
    history = [{"role": "user", "content": "How many cores?"}, {"role": "assistant", "content": "Two [1]."}]
    with make_client(settings, pipeline(settings, [chunk(DOC)], [0.9], model)) as client:

        def ask(n: int) -> str:
            question = f"{QUESTION} fail" if fails(n) else QUESTION
            body = {"question": question, "history": history if follows_up(n) else []}
            if n % 3:
                with client.stream("POST", "/ask", json=body | {"stream": True}) as r:
                    return sse(r.iter_lines())[-1][0]
            r = client.post("/ask", json=body)
            assert r.status_code == 200
            return "done" if r.json()["complete"] else "error"

        for n in range(5):
            ask(n)
        before = settled_thread_count(threading.active_count())
        ends = [ask(n) for n in range(QUESTIONS)]
        after = settled_thread_count(before)
    print(f"\nAPI: {before} threads before {QUESTIONS} questions, {after} after")
    assert after <= before + SLACK, sorted(t.name for t in threading.enumerate())
    assert ends.count("error") == sum(map(fails, range(QUESTIONS))) and model.ended == QUESTIONS + 5


def test_closing_an_answer_ends_the_model_stream_at_once(settings: Settings) -> None:
    """The Stop button's path: ``close`` (or ``with``) ends the model's stream before it returns."""
    model = ThreadedModel()
    p = pipeline(settings, [chunk(DOC)], [0.9], model)
    with p.stream(QUESTION) as stream:
        for k, _ in enumerate(stream):
            if k == 1:
                break
        assert model.ended == 1 and stream.answer is None
    stream = p.stream(QUESTION)
    it = iter(stream)
    next(it)
    stream.close()
    assert model.ended == 2
    assert p.ask(QUESTION).complete  # and the next question is answered


def run_script(code: str) -> subprocess.CompletedProcess[str]:
    """Python code in a subprocess that must exit by itself; a hang fails the test instead of the suite."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


FAILING_MODEL = """
import anyio
from pydantic_ai.models.function import FunctionModel

def tokens():
    yield "It needs "
    yield "eight "
    raise ValueError("the model failed mid-answer")

async def stream(messages, info):
    words = tokens()
    while (word := await anyio.to_thread.run_sync(next, words, None)) is not None:
        yield word

model = FunctionModel(stream_function=stream)
"""


def test_a_model_failing_mid_answer_does_not_keep_the_process_from_exiting(tmp_path: Path) -> None:
    """A streamed run that fails is closed, not left to the garbage collector: its AnyIO worker thread would keep
    ``threading._shutdown`` waiting after the last line, and ``crag bench`` would hang after its report."""
    code = (
        FAILING_MODEL
        + f"""
from dataclasses import replace
from crag.config import load_settings
from tests.fakes import chunk, pipeline

settings = load_settings(files_dir={str(tmp_path / "Files")!r}, chroma_dir={str(tmp_path / "db")!r})
p = replace(pipeline(settings, [chunk("The widget needs eight hundred megabytes.")], [0.9]), model=model)
answer = p.ask("How much memory does the widget need?")
print(answer.complete, answer.text)
"""
    )
    proc = run_script(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "It", "needs", "eight"]


def test_closing_the_event_loop_lets_a_process_exit_that_left_a_run_open() -> None:
    """What the CLI does last: a streamed run that something left open (no ``with``, failed mid-answer)
    is cancelled with the loop it runs on, and its worker thread ends."""
    code = (
        FAILING_MODEL
        + """
from pydantic_ai import Agent
from crag.models import close_event_loop

left_open = []
for _ in range(2):
    result = Agent(model).run_stream_sync("hi")
    left_open.append(result)
    try:
        for _ in result.stream_text(delta=True, debounce_by=None):
            pass
    except ValueError:
        pass
close_event_loop()
print("closed")
"""
    )
    proc = run_script(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "closed", proc.stderr


# ---------------------------------------------------------------------------------------------
# Questions the API refuses: an error at once, never a stream that hangs


def post_within_seconds(call: Callable[[], tuple[int, dict]]) -> tuple[int, dict]:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result(timeout=60)


@pytest.mark.parametrize(
    ("question", "says"), [("How much memory? " * 165, "2000"), ("\u200b\u200b", "empty"), ("\u200b \u2060", "empty")]
)
def test_streamed_question_too_long_or_invisible_is_an_error_at_once(
    settings: Settings, question: str, says: str
) -> None:
    model = ThreadedModel()
    with make_client(settings, pipeline(settings, [chunk(DOC)], [0.9], model)) as client:

        def call() -> tuple[int, dict]:
            with client.stream("POST", "/ask", json={"question": question, "stream": True}) as r:
                r.read()
                return r.status_code, r.json()

        status, body = post_within_seconds(call)
    assert status == 422 and says in body["error"], body
    assert model.prompts == []  # refused before anything ran


# ---------------------------------------------------------------------------------------------
# The embedded model's lock: never held by a stream that was left


class SlowLlama:
    """llama.cpp's streaming API, a token every 0.2 s: a Stop lands while a token is being made."""

    n_tokens = 0

    def create_chat_completion(self, **kwargs):
        for word in ["It ", "needs ", "eight ", "hundred ", "megabytes."]:
            time.sleep(0.2)
            yield {"choices": [{"delta": {"content": word}}]}


def test_a_stream_left_while_a_token_is_made_releases_the_embedded_model(real_models) -> None:
    from pydantic_ai import Agent

    from crag.models import LlamaCppChat, llama_cpp_model

    chat = LlamaCppChat.__new__(LlamaCppChat)  # the adapter and its lock, over a fake llama.cpp
    chat.max_tokens, chat.calls, chat.prompt_tokens, chat.completion_tokens = 64, 0, 0, 0
    chat._lock, chat._llm = threading.Lock(), SlowLlama()
    agent = Agent(llama_cpp_model(chat, "slow"))
    for _ in range(2):  # stopped, then asked again
        with agent.run_stream_sync("How much memory?") as result:
            for k, _ in enumerate(result.stream_text(delta=True, debounce_by=None)):
                if k == 1:
                    break  # the next token is being made on a worker thread
        assert chat._lock.acquire(timeout=5), "the abandoned stream kept the model locked"
        chat._lock.release()
    with agent.run_stream_sync("How much memory?") as result:
        assert "".join(result.stream_text(delta=True, debounce_by=None)) == "It needs eight hundred megabytes."
