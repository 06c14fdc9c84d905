"""``mlharness manifest show|search|cite|pack|unpack``: a model's published metadata, found, cited and carried.

``search`` reads the built-in manifests, the user's folders (``--path``) and, with a results root or database,
which manifests have results on which systems; it runs no hook. ``cite`` writes the ``published`` section as
BibTeX and as CITATION.cff (CFF 1.2.0)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from mlharness.errors import MLHarnessError


def register(man: argparse._SubParsersAction) -> None:
    sh = man.add_parser("show", help="a manifest's model, assets and published metadata (runs no hook)")
    sh.add_argument("name", help="a built-in manifest's name or a manifest file")
    se = man.add_parser("search", help="find manifests by text and by task, modality, framework or license")
    se.add_argument("text", nargs="?", default="", help="words every match contains (name, description, authors, "
                    "domain, keywords, benchmark, the cited work's title); none: every manifest")
    for flag, what in (("--task", "the MLPerf benchmark or accuracy metric"), ("--modality", "the modality"),
                       ("--framework", "a framework it runs on"), ("--license", "its license (SPDX)")):
        se.add_argument(flag, default=None, help=f"only manifests whose {what} contains this")
    se.add_argument("--path", type=Path, action="append", default=[], help="also search the manifests in this "
                    "folder (repeat for more)")
    se.add_argument("--results", type=Path, default=None, metavar="ROOT", help="a results root: add the systems "
                    "each manifest has results on (its evaluation database, indexed first)")
    se.add_argument("--db", default=None, metavar="URL", help="a database URL instead of ROOT's")
    ci = man.add_parser("cite", help="how to cite a manifest's model: BibTeX and CITATION.cff")
    ci.add_argument("name")
    ci.add_argument("--format", choices=("bibtex", "cff", "both"), default="both")
    pk = man.add_parser("pack", help="one archive with the manifest, its hooks and modules, its assets' URLs and "
                        "checksums (not the weights) and a README")
    pk.add_argument("name")
    pk.add_argument("--out", type=Path, default=None, help="the archive (default: ./<name>.tar.gz; never replaced)")
    up = man.add_parser("unpack", help="check a pack and extract it into a new folder (runs no hook)")
    up.add_argument("archive", type=Path)
    up.add_argument("--into", type=Path, required=True, help="a folder that does not exist yet, or is empty")
    for parser, func in ((sh, cmd_show), (se, cmd_search), (ci, cmd_cite), (pk, cmd_pack), (up, cmd_unpack)):
        parser.set_defaults(func=func)


def cmd_show(args: argparse.Namespace, out: Any) -> int:
    from mlharness.manifest.loader import load_manifest

    loaded = load_manifest(args.name)
    m = loaded.model
    acc = m.accuracy or (loaded.dataset.accuracy if loaded.dataset else None)
    table = Table(title=f"{m.name} {m.version}", show_header=False)
    rows = [("description", m.description), ("framework", f"{m.framework.name} {m.framework.version}"),
            ("other frameworks", ", ".join(m.frameworks)), ("modality", m.modality),
            ("mlperf", " / ".join(x for x in (m.mlperf.model, m.mlperf.benchmark) if x)),
            ("accuracy", acc.metric if acc else None),
            ("dataset", loaded.dataset.name if loaded.dataset else None)]
    rows += [(f"model {k}", str(v)) for k, v in (m.model.model_dump().items() if m.model else ()) if v]
    pub = m.published
    if pub is not None:
        rows += [("title", pub.title), ("authors", "; ".join(_person(a) for a in pub.authors)),
                 ("domain", pub.domain), ("keywords", ", ".join(pub.keywords)), ("license", pub.license),
                 ("doi", pub.doi), ("url", pub.url), ("repository", pub.repository),
                 ("released", pub.date_released.isoformat() if pub.date_released else None),
                 ("cite", _citation_line(pub.citation) if pub.citation else None)]
    else:
        rows += [("license", m.license), ("published", "no 'published' section: authors, license and citation "
                                                       "are not declared (docs/manifest.md)")]
    rows.append(("path", str(loaded.path)))
    for key, value in rows:
        if value:
            table.add_row(key, escape(str(value)))
    out.print(table)
    return 0


def _person(a: Any) -> str:
    extra = ", ".join(x for x in (a.affiliation, a.orcid) if x)
    return a.display() + (f" ({extra})" if extra else "")


def _citation_line(c: Any) -> str:
    authors = ", ".join(a.display() for a in c.authors)
    where = f", {c.journal}" if c.journal else ""
    return f"{authors}. {c.title}{where}, {c.year}" + (f". doi:{c.doi}" if c.doi else "")


# ---------------------------------------------------------------- search

def _candidates(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    from mlharness.manifest import safeyaml
    from mlharness.manifest.loader import manifest_dirs

    found = []
    for root in manifest_dirs() + paths:
        if not root.is_dir():
            raise MLHarnessError(f"--path {root} is not a folder")
        for path in sorted(list(root.rglob("*.yaml")) + list(root.rglob("*.yml"))):
            try:
                data = safeyaml.safe_load_file(path)
            except (OSError, ValueError):
                continue  # `manifest list` and `validate` say what is wrong with it
            if isinstance(data, dict) and "framework" in data:
                found.append((path, data))
    return found


def _facts(data: dict[str, Any]) -> dict[str, str]:
    pub = data.get("published") if isinstance(data.get("published"), dict) else {}
    mlperf = data.get("mlperf") if isinstance(data.get("mlperf"), dict) else {}
    acc = data.get("accuracy") if isinstance(data.get("accuracy"), dict) else {}
    fw = data.get("framework") if isinstance(data.get("framework"), dict) else {}
    frameworks = [str(fw.get("name", ""))] + [str(k) for k in (data.get("frameworks") or {})]
    authors = [" ".join(str(a.get(k, "")) for k in ("given_names", "family_names", "name")).strip()
               for a in pub.get("authors") or [] if isinstance(a, dict)]
    return {"name": str(data.get("name", "")), "description": str(data.get("description", "")),
            "modality": str(data.get("modality", "")), "framework": " ".join(frameworks),
            "task": " ".join(str(x) for x in (mlperf.get("model"), mlperf.get("benchmark"), acc.get("metric")) if x),
            "license": str(pub.get("license") or data.get("license") or ""), "authors": "; ".join(authors),
            "domain": str(pub.get("domain") or ""), "keywords": " ".join(map(str, pub.get("keywords") or [])),
            "title": str(pub.get("title") or ""), "cited": str((pub.get("citation") or {}).get("title") or "")}


def search(text: str, paths: list[Path], filters: dict[str, str | None]) -> list[tuple[Path, dict[str, str]]]:
    words = [w.lower() for w in re.findall(r"\S+", text)]
    hits = []
    for path, data in _candidates(paths):
        facts = _facts(data)
        haystack = " ".join(facts.values()).lower()
        if not all(w in haystack for w in words):
            continue
        if any(want and want.lower() not in facts[key].lower() for key, want in filters.items()):
            continue
        hits.append((path, facts))
    return hits


def systems_by_manifest(root: Path | None, db: str | None) -> dict[str, dict[str, int]]:
    """{manifest name: {system: VALID runs}} of a results root's (or database's) runs; every system a
    manifest ran on appears, with 0 where none of its runs was VALID."""
    from mlharness.results_db.query import Filter, list_runs
    from mlharness.results_db.store import open_store

    store = open_store(root, db)
    try:
        runs = store.run(list_runs, Filter())
    finally:
        store.close()
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        if r.manifest:
            per = out.setdefault(r.manifest, {})
            system = r.system or r.host or "?"
            per[system] = per.get(system, 0) + (r.validity == "VALID")
    return out


def cmd_search(args: argparse.Namespace, out: Any) -> int:
    filters = {"task": args.task, "modality": args.modality, "framework": args.framework, "license": args.license}
    hits = search(args.text, args.path, filters)
    systems = systems_by_manifest(args.results, args.db) if args.results or args.db else None
    table = Table("name", "framework", "task", "license", "authors", *(["results"] if systems is not None else []),
                  "path", title=f"{len(hits)} manifest(s)")
    for path, f in hits:
        row = [f["name"], f["framework"], f["task"], f["license"], f["authors"]]
        if systems is not None:
            per = systems.get(f["name"], {})
            row.append(", ".join(f"{s} ({n} VALID)" for s, n in sorted(per.items())) or "none")
        table.add_row(*(escape(x) for x in row + [str(path)]))
    out.print(table)
    return 0 if hits else 1


# ---------------------------------------------------------------- cite

def _published(name: str) -> tuple[Any, Any]:
    from mlharness.manifest.loader import load_manifest

    loaded = load_manifest(name)
    if loaded.model.published is None:
        raise MLHarnessError(f"{loaded.path} has no 'published' section: nothing says who made the model or how "
                             "to cite it (add authors, license and citation: docs/manifest.md)")
    return loaded.model, loaded.model.published


def _bib_authors(people: list[Any]) -> str:
    return " and ".join(f"{{{a.name}}}" if a.name else ", ".join(x for x in (a.family_names, a.given_names) if x)
                        for a in people)


def _bib_escape(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", text)


def bibtex(model: Any, pub: Any) -> str:
    c = pub.citation
    kind = {"article": "article", "conference-paper": "inproceedings", "report": "techreport", "thesis": "phdthesis",
            "book": "book"}.get(c.type, "misc") if c else "misc"
    authors = c.authors if c else pub.authors
    first = authors[0].family_names or authors[0].name or model.name
    year = c.year if c else (pub.date_released.year if pub.date_released else None)
    key = re.sub(r"[^A-Za-z0-9]", "", first) + (str(year) if year else "") + re.sub(r"[^a-z0-9]", "", model.name.lower())
    fields = [("title", c.title if c else (pub.title or model.name)), ("author", _bib_authors(authors)),
              ("journal" if kind == "article" else "booktitle", c.journal if c else None),
              ("year", str(year) if year else None), ("doi", c.doi if c else pub.doi),
              ("url", (c.url if c else None) or pub.url), ("version", None if c else model.version),
              ("note", None if c else f"License: {pub.license}")]
    verbatim = ("author", "doi", "url")  # names already braced; identifiers taken as they are
    body = ",\n".join(f"  {k} = {{{v if k in verbatim else _bib_escape(v)}}}" for k, v in fields if v)
    return f"@{kind}{{{key},\n{body}\n}}\n"


def _cff_person(a: Any) -> dict[str, str]:
    keys = (("family-names", a.family_names), ("given-names", a.given_names), ("name", a.name),
            ("affiliation", a.affiliation), ("orcid", a.orcid), ("email", a.email))
    return {k: v for k, v in keys if v}


def cff(model: Any, pub: Any) -> str:
    import yaml

    doc: dict[str, Any] = {"cff-version": "1.2.0", "message": "If you use this model, please cite it as below.",
                           "type": "software", "title": pub.title or model.name, "version": model.version,
                           "authors": [_cff_person(a) for a in pub.authors], "license": pub.license}
    for key, value in (("doi", pub.doi), ("url", pub.url), ("repository-code", pub.repository),
                       ("keywords", pub.keywords or None),
                       ("date-released", pub.date_released.isoformat() if pub.date_released else None),
                       ("abstract", model.description or None)):
        if value:
            doc[key] = value
    if pub.citation is not None:
        c = pub.citation
        ref = {"type": c.type, "title": c.title, "authors": [_cff_person(a) for a in c.authors], "year": c.year}
        ref.update({k: v for k, v in (("journal", c.journal), ("doi", c.doi), ("url", c.url)) if v})
        doc["preferred-citation"] = ref
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def cmd_cite(args: argparse.Namespace, out: Any) -> int:
    model, pub = _published(args.name)
    parts = ([bibtex(model, pub)] if args.format in ("bibtex", "both") else []) + \
            ([cff(model, pub)] if args.format in ("cff", "both") else [])
    print("\n".join(parts), end="")
    return 0


# ---------------------------------------------------------------- pack

def cmd_pack(args: argparse.Namespace, out: Any) -> int:
    from mlharness.manifest.loader import load_manifest
    from mlharness.manifest.pack import pack

    target = args.out or Path(f"{load_manifest(args.name).model.name}.tar.gz")
    listing = pack(args.name, target)
    out.print(f"wrote {escape(str(target))}: {len(listing['files'])} files "
              f"({escape(', '.join(listing['files']))}); the model's assets are named, not carried")
    return 0


def cmd_unpack(args: argparse.Namespace, out: Any) -> int:
    from mlharness.manifest.pack import unpack

    manifest = unpack(args.archive, args.into)
    out.print(f"unpacked into {escape(str(args.into))}; run it with: mlharness run --manifest "
              f"{escape(str(manifest))}")
    return 0
