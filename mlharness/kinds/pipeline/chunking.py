"""Documents into passages as the e2e-rag reference makes them, so a database built here holds the passage texts the
reference's holds (``db_manifest.py``'s corpus set is a hash of exactly those texts).

The reference (``reference_SUT_datasetup.py``, ``scripts/run_ingestion.sh``) extracts a document's text with
``read_docs.HTMLExtractor(text_boundary="word")``, whose ``_clean_text`` normalises it (NFKC, odd spaces to spaces,
blank lines dropped, then the "word" boundary pass: a space after ``.!?,:;`` before a letter, hyphenated line breaks
joined, whitespace runs to one space), then cuts it with ``text_splitter.split_into_fixed_passages(text, 768, 32)``:
fixed 768-character windows starting every 736 characters, each stripped (not at word or sentence boundaries: the
"word" in ``len768_ov32_word`` names the cleaning pass). The functions here are those, line for line.

HTML: the reference parses with BeautifulSoup and drops Wikipedia's navigation; :func:`html_text` is a standard
library stand-in that keeps the visible text of ``<body>`` (scripts, styles and ``<head>`` dropped) — equal on
plain documents such as the synthetic corpus, not on real Wikipedia pages.
"""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser

CHUNK_SIZE = 768  # reference_SUT_datasetup.py: chunk_size
CHUNK_OVERLAP = 32  # chunk_overlap
TEXT_BOUNDARY = "word"  # text_boundary


def clean_text(text: str) -> str:
    """``text_splitter.clean_text``: whitespace runs to one space (the newline pass after it never matches)."""
    text = re.sub(r"\s+", " ", text.strip())
    return re.sub(r"\n\s*\n\s*\n+", "\n\n", text)


def split_into_fixed_passages(text: str, fixed_length: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """``text_splitter.split_into_fixed_passages``: windows of ``fixed_length`` characters every
    ``fixed_length - overlap``, each stripped, empty ones dropped."""
    text = clean_text(text)
    if len(text) <= fixed_length:
        return [text] if text else []
    passages = []
    start = 0
    while start < len(text):
        passage = text[start:min(start + fixed_length, len(text))].strip()
        if passage:
            passages.append(passage)
        start = start + fixed_length - overlap
    return passages


def extractor_clean(text: str, boundary: str = TEXT_BOUNDARY) -> str:
    """``read_docs.HTMLExtractor._clean_text`` with ``text_boundary`` ``word``, ``sentence`` or ``none``."""
    if boundary not in ("word", "sentence", "none"):
        raise ValueError(f"text_boundary must be 'word', 'sentence' or 'none', got {boundary!r}")
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"[\u00A0\u2000-\u200B\u2028\u2029]", " ", text)
    text = text.strip().replace("\r", "\n")
    text = re.sub(r" +", " ", text)
    text = re.sub(r"\n+", "\n", text)
    text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
    if boundary == "sentence":
        text = re.sub(r"([.!?])([A-Z])", r"\1 \2", text)
        text = re.sub(r"\b(Mr|Mrs|Dr|Prof|etc|vs|Inc|Ltd|Corp|U\.S|U\.K|E\.g|I\.e)\.(\s+)([a-z])", r"\1.\2\3", text,
                      flags=re.IGNORECASE)
    elif boundary == "word":
        text = re.sub(r"([.!?,:;])([A-Za-z])", r"\1 \2", text)
        text = re.sub(r"(\w+)-\s+(\w+)", r"\1-\2", text)
        # the reference's "smart quote" lines replace '"' by itself and, through a stray triple-quoted string, this
        # literal by an apostrophe: kept so that the texts stay equal
        text = text.replace(', "\'").replace(', "'")
        text = re.sub(r"\s+", " ", text)
    return text


class _Visible(HTMLParser):
    SKIP = {"script", "style", "head", "title", "noscript"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in ("p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML document, one block per line (see the module's note on BeautifulSoup)."""
    parser = _Visible()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)


def document_passages(content: str, name: str, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP,
                      boundary: str = TEXT_BOUNDARY) -> list[str]:
    """One document's passages as ``DatasetupSUT._process_document`` makes them: text extracted (HTML when the
    name ends in .html/.htm) and cleaned, cut into fixed passages; an empty document becomes the one passage
    ``Document: <name>``, as the reference's fallback."""
    text = html_text(content) if name.lower().endswith((".html", ".htm")) else content
    text = extractor_clean(text, boundary)
    if not text.strip():
        text = f"Document: {name}"
    return split_into_fixed_passages(text, size, overlap) or [text]
