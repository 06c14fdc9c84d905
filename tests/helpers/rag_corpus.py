"""A tiny frozen corpus in the reference's doc_html layout (pages, url_mapping.json) and a FRAMES-like TSV of
questions over it, for the retrieval and database tests; the tiny random embedder and reranker built once."""

from __future__ import annotations

import csv
import json
from pathlib import Path

TOWNS = ("Kalomer", "Vinsator", "Belriden", "Ulmarfen", "Ostquazel", "Saloden")


def page(town: str, i: int) -> str:
    facts = " ".join(f"{town} fact {j}: the {town} river bridge number {i * 10 + j} was built in year {1800 + j}."
                     for j in range(12))
    return f"<html><head><title>{town}</title></head><body><h1>{town}</h1><p>{facts}</p></body></html>"


def write_corpus(root: Path) -> tuple[Path, Path]:
    """(doc_html folder, frames_dataset.tsv) with one page per town, several passages each."""
    docs = root / "doc_html"
    docs.mkdir(parents=True)
    mapping = {}
    for i, town in enumerate(TOWNS):
        name = f"en.wikipedia.org_wiki_{town}"
        (docs / f"{name}.html").write_text(page(town, i))
        mapping[name] = f"https://en.wikipedia.org/wiki/{town}"
    (docs / "url_mapping.json").write_text(json.dumps(mapping))
    tsv = root / "frames_dataset.tsv"
    with open(tsv, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["Unnamed: 0", "Prompt", "Answer", "wikipedia_link_1"])
        for i, town in enumerate(TOWNS):
            w.writerow([i, f"When was the {town} river bridge built?", "1800", mapping[f"en.wikipedia.org_wiki_{town}"]])
    return docs, tsv
