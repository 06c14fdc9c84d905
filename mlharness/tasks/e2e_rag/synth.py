"""A synthetic FRAMES set and its frozen corpus, in the layout e2e-rag's reference reads (``dataset synth e2e-rag``).

The official download (``scripts/download_dataset_and_models.sh``) leaves ``frames-benchmark-dataset/`` with
``frames_dataset.tsv`` (the Hugging Face ``google/frames-benchmark`` test split written by ``df.to_csv(sep='\\t',
index=False)``: ``Unnamed: 0``, ``Prompt``, ``Answer``, ``wikipedia_link_1`` .. ``wikipedia_link_10``,
``wikipedia_link_11+``, ``reasoning_types``, ``wiki_links``) and ``doc_html/docs.tar.gz`` (the frozen pages, flat
``*.html`` files) beside ``doc_html/url_mapping.json`` (file name without ``.html`` -> the page's URL). A page's file
name is ``download_docs.py``'s ``create_filename``: the URL without ``https://``, ``/`` and ``:`` made ``_``.

Here each question is two hops over two pages (a person's page names their home town, the town's page holds the
answer), so retrieval has two expected URLs and a question is answerable only from the corpus. The pages are also
extracted into ``doc_html/`` beside the archive, as the download script extracts them, so the index builder reads
them where the reference does. Seeded and deterministic: the same seed writes the same bytes (the archive's
members carry a fixed mtime).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import tarfile
from pathlib import Path

TSV = "frames_dataset.tsv"
DOCS = "doc_html"
ARCHIVE = "docs.tar.gz"
URL_MAPPING = "url_mapping.json"
LINK_COLUMNS = tuple(f"wikipedia_link_{i}" for i in range(1, 11)) + ("wikipedia_link_11+",)
COLUMNS = ("Unnamed: 0", "Prompt", "Answer", *LINK_COLUMNS, "reasoning_types", "wiki_links")
DEFAULT_COUNT = 8

_SYLLABLES = ("ka", "lo", "mer", "vin", "sa", "tor", "bel", "ri", "den", "ul", "mar", "fen", "ost", "qua", "zel")
_CRAFTS = ("clockmaker", "cartographer", "botanist", "glassblower", "astronomer", "luthier", "weaver", "engraver")
_FILLER = ("The region is known for its rivers and old stone bridges.",
           "Travellers often describe the local markets as lively.",
           "Records from the period are kept in the municipal archive.",
           "Several festivals take place there every summer.")


def page_filename(url: str) -> str:
    """``download_docs.py``'s ``create_filename`` for an HTML download (200 characters at most, then ``.html``)."""
    return url.replace("https://", "").replace("/", "_").replace(":", "_")[:200] + ".html"


def _name(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def _page(title: str, sentences: list[str]) -> str:
    body = "\n".join(f"<p>{s}</p>" for s in sentences)
    return (f"<!DOCTYPE html>\n<html><head><title>{title} - Wikipedia</title></head>\n<body>\n"
            f"<div id=\"mw-navigation\">Main menu</div>\n<h1>{title}</h1>\n"
            f"<div id=\"mw-content-text\"><div class=\"mw-parser-output\">\n{body}\n</div></div>\n</body></html>\n")


def synth_questions(count: int, seed: int) -> tuple[list[dict[str, str]], dict[str, str]]:
    """``count`` FRAMES rows and the pages they need ({URL: HTML}); distinct names, so answers do not collide."""
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    pages: dict[str, str] = {}
    used: set[str] = set()

    def fresh(parts: int) -> str:
        while True:
            name = _name(rng, parts)
            if name not in used:
                used.add(name)
                return name

    for i in range(count):
        person, surname, town = fresh(2), fresh(3), fresh(3)
        year, craft = str(rng.randint(1150, 1890)), rng.choice(_CRAFTS)
        full = f"{person} {surname}"
        person_url = f"https://en.wikipedia.org/wiki/{person}_{surname}"
        town_url = f"https://en.wikipedia.org/wiki/{town}"
        pages[person_url] = _page(full, [f"{full} was a {craft} born in the town of {town}.",
                                         f"{full} is remembered for work on {rng.choice(_CRAFTS)}s' tools.",
                                         rng.choice(_FILLER)])
        pages[town_url] = _page(town, [f"{town} is a small town.", f"{town} was founded in the year {year}.",
                                       rng.choice(_FILLER), rng.choice(_FILLER)])
        links = [person_url, town_url]
        row = {"Unnamed: 0": str(i),
               "Prompt": f"In which year was the home town of the {craft} {full} founded?",
               "Answer": year, "reasoning_types": "Multiple constraints | Temporal reasoning",
               "wiki_links": repr(links)}
        row.update({col: (links[j] if j < len(links) else "") for j, col in enumerate(LINK_COLUMNS)})
        rows.append(row)
    return rows, pages


def write_synthetic_frames(out: Path, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write ``frames_dataset.tsv`` and ``doc_html/`` (``docs.tar.gz``, ``url_mapping.json``, the pages) to
    ``out``; returns ``out``."""
    if count < 1:
        raise ValueError(f"--count must be at least 1, got {count}")
    out = Path(out)
    rows, pages = synth_questions(count, seed)
    docs = out / DOCS
    docs.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    # pandas' to_csv: tab-separated, a header, empty cells for missing links, quotes only where needed
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (out / TSV).write_text(buf.getvalue(), encoding="utf-8")
    mapping = {}
    # gzip's header carries a time and a name: mtime 0 and no name keep the archive's bytes the seed's alone
    with open(docs / ARCHIVE, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for url in sorted(pages):
            name = page_filename(url)
            data = pages[url].encode("utf-8")
            (docs / name).write_bytes(data)
            mapping[name[: -len(".html")]] = url
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    (docs / URL_MAPPING).write_text(json.dumps(mapping, indent=2, ensure_ascii=False), encoding="utf-8")
    return out
