"""Regenerate Files/crag-user-guide.pdf: a short user guide of this app, in English and Chinese.

The sample gives a first run something to answer from (rebuild, then ask "What does the Incorrect
action do?" or "如何重建知识库？"). Everything in it is this project's own text; the Chinese font is
the Droid Sans Fallback that PyMuPDF has built in (``china-s``), subset so the file stays small.

    .venv/bin/python scripts/make_sample_pdf.py [OUTPUT]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pymupdf

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "Files" / "crag-user-guide.pdf"

A4 = pymupdf.paper_rect("a4")
LEFT, RIGHT, TOP, BOTTOM = 64.0, A4.width - 64.0, 72.0, A4.height - 64.0
INK = (0.12, 0.14, 0.18)
MUTED = (0.42, 0.45, 0.5)
ACCENT = (0.16, 0.36, 0.7)

# Latin words stay whole; every CJK character (and CJK punctuation) is a break opportunity.
TOKENS = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]|[^\s\u3000-\u303f\u3400-\u9fff\uff00-\uffef]+\s*|\s+")

EN = {
    "title": "CRAG Knowledge Base: User Guide",
    "subtitle": "Chat with your PDFs on your own machine. English first, Chinese (中文) below.",
    "sections": [
        (
            "1 What the app does",
            [
                "The app answers questions from the PDFs in the Files folder. Every answer cites its sources "
                "as [1], [2] and shows how it was made. Answers use Corrective RAG (CRAG): the retrieved "
                "passages are graded, weak retrieval is corrected with a web search, and only the useful "
                "sentences reach the model.",
                "It runs offline by default. When no Ollama server answers, a small model that ships inside "
                "a Python package runs in the app itself.",
            ],
        ),
        (
            "2 Getting started",
            [
                "Step 1. Drop PDF files into the Files folder, or upload them in the sidebar. Uploads are "
                "limited to 50 MB per file, and only PDF files are accepted.",
                "Step 2. Click Rebuild knowledge base in the sidebar. A progress bar shows the file and the "
                "page being read. A file that cannot be read is marked failed with the reason; the other "
                "files are still indexed.",
                "Step 3. Ask a question in the chat box. The answer streams in, with a badge that names the "
                "CRAG action and an expander called How this answer was made.",
            ],
        ),
        (
            "3 How an answer is made",
            [
                "The retrieval evaluator scores each retrieved passage between -1 and 1. Two thresholds turn "
                "the scores into one of three actions:",
            ],
        ),
    ],
    "table": [
        ("Action", "When", "What happens"),
        ("Correct", "a score is at or above the upper threshold (0.5)", "the passages are refined and used"),
        ("Ambiguous", "a score is between the two thresholds", "the passages and a web search are both used"),
        (
            "Incorrect",
            "every score is below the lower threshold (-0.5)",
            "the passages are dropped; the web is searched",
        ),
    ],
    "table_caption": "Table 1: The three CRAG actions and the default thresholds.",
    "after": [
        (
            "4 Settings",
            [
                "The sidebar changes the number of passages retrieved (top-k, 5 by default), the two "
                "thresholds, web search on or off, and the evaluator. Changes apply to the next question.",
            ],
        ),
        (
            "5 When something goes wrong",
            [
                "Ollama is not reachable: start it with the command ollama serve, or keep using the built-in "
                "model. A model is missing: pull it from the sidebar. A file failed: read its reason in the "
                "file list, fix or replace the file, then rebuild.",
            ],
        ),
    ],
}

ZH = {
    "title": "CRAG 知识库：用户指南",
    "subtitle": "在自己的电脑上与 PDF 文档对话。",
    "sections": [
        (
            "1 功能简介",
            [
                "本应用根据 Files 文件夹中的 PDF 文档回答问题。每个回答都会用 [1]、[2] 标注来源，"
                "并展示回答是如何生成的。回答采用纠正式检索增强生成（CRAG）：先给检索到的段落打分，"
                "检索结果不理想时用网络搜索来纠正，只把有用的句子交给模型。",
                "默认情况下完全离线运行。如果没有可用的 Ollama 服务器，应用会使用 Python 包自带的小模型。",
            ],
        ),
        (
            "2 快速开始",
            [
                "第一步：把 PDF 文件放进 Files 文件夹，或在侧边栏上传。每个文件最大 50 MB，只接受 PDF 文件。",
                "第二步：点击侧边栏的 Rebuild knowledge base（重建知识库）。进度条会显示正在读取的文件和页码。"
                "无法读取的文件会标记为失败并给出原因，其他文件照常建立索引。",
                "第三步：在聊天框中提问。回答会逐字显示，并带有一个标明 CRAG 动作的标签，"
                "以及“How this answer was made”（回答是如何生成的）展开面板。",
            ],
        ),
        (
            "3 回答是如何生成的",
            ["检索评估器给每个检索到的段落打分，分数在 -1 到 1 之间。两个阈值把分数变成三种动作之一："],
        ),
    ],
    "table": [
        ("动作", "条件", "结果"),
        ("Correct（正确）", "有分数达到上阈值（0.5）", "精炼并使用检索到的段落"),
        ("Ambiguous（模糊）", "分数介于两个阈值之间", "同时使用段落和网络搜索"),
        ("Incorrect（错误）", "所有分数都低于下阈值（-0.5）", "丢弃段落，改用网络搜索"),
    ],
    "table_caption": "表 1：三种 CRAG 动作与默认阈值。",
    "after": [
        (
            "4 设置",
            ["侧边栏可以调整检索段落数（top-k，默认 5）、两个阈值、是否使用网络搜索以及评估器。修改对下一个问题生效。"],
        ),
        (
            "5 常见问题",
            [
                "Ollama 无法连接：用 ollama serve 命令启动它，或继续使用内置模型。缺少模型：在侧边栏拉取。"
                "文件失败：在文件列表中查看原因，修复或替换该文件后重建知识库。"
            ],
        ),
    ],
}


class Layout:
    """A minimal flowing layout: paragraphs wrap, pages break, every page gets a header and a footer."""

    def __init__(self, doc: pymupdf.Document) -> None:
        self.doc = doc
        self.latin = pymupdf.Font("helv")
        self.latin_bold = pymupdf.Font("hebo")
        self.cjk = pymupdf.Font("china-s")
        self.page: pymupdf.Page | None = None
        self.writers: dict[tuple[float, float, float], pymupdf.TextWriter] = {}
        self.y = TOP

    def _font(self, text: str, bold: bool = False) -> pymupdf.Font:
        if re.search(r"[^\x00-\x7f]", text):
            return self.cjk
        return self.latin_bold if bold else self.latin

    def new_page(self) -> None:
        self.finish_page()
        self.page = self.doc.new_page(width=A4.width, height=A4.height)
        # A TextWriter draws in one colour: one writer per colour, written when the page is done.
        self.writers = {colour: pymupdf.TextWriter(self.page.rect) for colour in (INK, MUTED, ACCENT)}
        self.y = TOP
        header = "CRAG Knowledge Base · User Guide / 用户指南"
        self.writers[MUTED].append((LEFT, 40), header, font=self.cjk, fontsize=8)

    def finish_page(self) -> None:
        if self.page is not None:
            for colour, writer in self.writers.items():
                writer.write_text(self.page, color=colour)

    def wrap(self, text: str, font: pymupdf.Font, size: float, width: float) -> list[str]:
        lines, line = [], ""
        for token in TOKENS.findall(text):
            if font.text_length(line + token, fontsize=size) <= width or not line.strip():
                line += token
            else:
                lines.append(line.rstrip())
                line = token.lstrip()
        if line.strip():
            lines.append(line.rstrip())
        return lines

    def text(self, text: str, size: float = 10, bold: bool = False, color=INK, after: float = 6, indent: float = 0):
        font = self._font(text, bold)
        leading = size * 1.4
        lines = self.wrap(text, font, size, RIGHT - LEFT - indent)
        if self.y + leading * min(len(lines), 2) > BOTTOM:  # keep at least two lines together
            self.new_page()
        for line in lines:
            if self.y + leading > BOTTOM:
                self.new_page()
            self.y += leading
            self.writers[color].append((LEFT + indent, self.y - size * 0.3), line, font=font, fontsize=size)
        self.y += after

    def heading(self, text: str, size: float = 14) -> None:
        if self.y + 80 > BOTTOM:
            self.new_page()
        self.y += 8
        self.text(text, size=size, bold=True, color=ACCENT, after=4)

    def rule(self) -> None:
        self.page.draw_line((LEFT, self.y), (RIGHT, self.y), color=MUTED, width=0.5)
        self.y += 10

    def table(self, rows: list[tuple[str, ...]], caption: str, widths: tuple[float, ...]) -> None:
        size, pad = 9.5, 4.0
        total = RIGHT - LEFT
        cols = [w * total for w in widths]
        wrapped = [
            [self.wrap(cell, self._font(cell, r == 0), size, cols[c] - 2 * pad) for c, cell in enumerate(row)]
            for r, row in enumerate(rows)
        ]
        heights = [max(len(cell) for cell in row) * size * 1.35 + 2 * pad for row in wrapped]
        if self.y + sum(heights) + 30 > BOTTOM:
            self.new_page()
        self.text(caption, size=9, color=MUTED, after=2)
        y = self.y + 2
        for r, row in enumerate(wrapped):
            x = LEFT
            for c, cell in enumerate(row):
                rect = pymupdf.Rect(x, y, x + cols[c], y + heights[r])
                fill = (0.9, 0.93, 0.98) if r == 0 else None
                self.page.draw_rect(rect, color=MUTED, fill=fill, width=0.5)
                for i, line in enumerate(cell):
                    font = self._font(line, r == 0)
                    self.writers[INK].append(
                        (x + pad, y + pad + size * (1.0 + 1.35 * i)), line, font=font, fontsize=size
                    )
                x += cols[c]
            y += heights[r]
        self.y = y + 12


def write_guide(layout: Layout, text: dict, first: bool) -> None:
    if not first:
        layout.new_page()
    layout.text(text["title"], size=22, bold=True, after=4)
    layout.text(text["subtitle"], size=11, color=MUTED, after=8)
    layout.rule()
    for heading, paragraphs in text["sections"]:
        layout.heading(heading)
        for paragraph in paragraphs:
            layout.text(paragraph)
    layout.table(text["table"], text["table_caption"], (0.22, 0.4, 0.38))
    for heading, paragraphs in text["after"]:
        layout.heading(heading)
        for paragraph in paragraphs:
            layout.text(paragraph)


def make_sample_pdf(output: Path = DEFAULT_OUTPUT) -> Path:
    doc = pymupdf.open()
    layout = Layout(doc)
    layout.new_page()
    write_guide(layout, EN, first=True)
    write_guide(layout, ZH, first=False)
    layout.finish_page()
    for number, page in enumerate(doc, start=1):
        page.insert_text((A4.width / 2 - 20, A4.height - 36), f"Page {number} / {doc.page_count}", fontsize=8)
    doc.set_metadata({"title": EN["title"], "author": "crag-kb", "subject": "User guide / 用户指南"})
    doc.subset_fonts()
    output.parent.mkdir(parents=True, exist_ok=True)
    # No timestamps in the file: regenerating it gives the same bytes, so git sees no change.
    doc.save(output, garbage=4, deflate=True, no_new_id=True)
    return output


if __name__ == "__main__":
    path = make_sample_pdf(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT)
    print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
