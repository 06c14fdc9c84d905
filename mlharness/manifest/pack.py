"""``mlharness manifest pack|unpack``: a manifest with everything it needs to run elsewhere except the weights.

A pack is one .tar.gz: the manifest, the files it names beside it (hook files, a dataset manifest, the modules its
hooks import and its ``model.generator`` / ``model.factory`` module, each from the manifest's folder), a README,
and ``mlharness-pack.json``: each file's SHA-256, the model's assets as URLs and checksums (a model file is fetched
and verified where the pack is run, never carried), the published metadata, and the mlharness version that packed
it. Built-in dataset manifests are named, not carried (every mlharness has them).

``unpack`` trusts nothing in the archive: it extracts within tight limits (size, entries, expansion ratio: the
model-archive extractor's checks), refuses absolute or ``..`` paths, links, devices, files the pack list does not
name or whose checksum differs, and a destination that exists with anything in it; then it validates the manifest
(its schema and hooks' syntax; no hook runs). What it extracted goes to the destination only when all of that
passed."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from mlharness.errors import AssetError, MLHarnessError
from mlharness.fileguard import read_bytes_bounded, read_json
from mlharness.manifest.archives import ArchiveLimits, extract_into
from mlharness.manifest.loader import MANIFESTS_DIR, LoadedManifest, load_manifest
from mlharness.manifest.schema import DATASET_ALL_HOOK_KEYS, MODEL_HOOK_KEYS, HookRef
from mlharness.manifest.targets import beside_manifest

PACK_LIST = "mlharness-pack.json"
FILE_LIMIT = 16 << 20  # one packed file: manifests, hooks and modules, never weights
LIMITS = ArchiveLimits(max_bytes=256 << 20, max_files=2000, max_ratio=200.0)


class PackError(MLHarnessError):
    pass


def _inside(path: Path, root: Path, what: str) -> str:
    """``path`` relative to ``root`` (POSIX), or an error naming what lies outside the manifest's folder."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise PackError(f"{what} {path} lies outside the manifest's folder {root}: a pack carries only what is "
                        "beside the manifest (move it there and name it relative to the manifest)") from None


def _imported_tops(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def _module_files(root: Path, top: str) -> list[Path]:
    """The files of module ``top`` when it lives in ``root`` (a .py file, or a package's .py files)."""
    if (root / f"{top}.py").is_file():
        return [root / f"{top}.py"]
    if (root / top / "__init__.py").is_file():
        return sorted(p for p in (root / top).rglob("*.py") if "__pycache__" not in p.parts)
    return []


def packed_files(loaded: LoadedManifest) -> tuple[dict[str, Path], str | None]:
    """{name in the pack: file} of what the manifest needs beside it, and the built-in dataset it names."""
    root = loaded.directory
    files = {loaded.path.name: loaded.path}
    builtin = None
    sections = [(loaded.model, MODEL_HOOK_KEYS, loaded.path)]
    if loaded.dataset is not None and loaded.dataset_source is not None:
        ds = loaded.dataset_source.path
        if ds.resolve().is_relative_to(MANIFESTS_DIR.resolve()):
            builtin = loaded.dataset.name
        else:
            files[_inside(ds, root, "the dataset manifest")] = ds
            sections.append((loaded.dataset, DATASET_ALL_HOOK_KEYS, ds))
    elif loaded.dataset is not None:
        sections.append((loaded.dataset, DATASET_ALL_HOOK_KEYS, loaded.path))
    sources = []
    for owner, keys, where in sections:
        for key in keys:
            hook = getattr(owner, key, None)
            if isinstance(hook, HookRef):
                path = where.parent / hook.file
                files[_inside(path, root, f"the hook file of '{key}'")] = path
                sources.append(read_bytes_bounded(path, f"hook file of '{key}'", FILE_LIMIT).decode("utf-8", "replace"))
            elif isinstance(hook, str):
                sources.append(hook)
    tops = set().union(*map(_imported_tops, sources)) if sources else set()
    asset = loaded.model.model
    for target in (asset.generator, asset.factory) if asset is not None else ():
        if target and beside_manifest(target, root) is not None:
            tops.add(target.partition(":")[0].split(".")[0])
    for top in sorted(tops):
        for path in _module_files(root, top):
            files[_inside(path, root, f"module '{top}'")] = path
    return files, builtin


def _assets(loaded: LoadedManifest) -> dict[str, Any]:
    asset = loaded.model.model
    if asset is None:
        return {}
    return {k: v for k, v in asset.model_dump().items() if v not in (None, False)}


def _readme(loaded: LoadedManifest, assets: dict[str, Any], builtin: str | None) -> str:
    m = loaded.model
    pub = m.published
    lines = [f"# {pub.title if pub and pub.title else m.name} (mlharness manifest {m.name} {m.version})", "",
             m.description or "", ""]
    if pub:
        lines += [f"Authors: {', '.join(a.display() for a in pub.authors)}", f"License: {pub.license}", ""]
    lines += ["Run it:", "", "```", f"mlharness manifest unpack {m.name}.tar.gz --into {m.name}",
              f"mlharness manifest validate {m.name}/{loaded.path.name}",
              f"mlharness run --manifest {m.name}/{loaded.path.name} --scenario Offline --mode accuracy", "```", ""]
    if assets:
        lines += ["The model is not in this pack: mlharness fetches it and verifies its checksum on the first run "
                  f"(mlharness-pack.json, 'assets': {', '.join(f'{k}={v}' for k, v in assets.items())})."]
    if builtin:
        lines += [f"The dataset manifest is mlharness's built-in '{builtin}'."]
    return "\n".join(lines) + "\n"


def pack(ref: str, out: Path) -> dict[str, Any]:
    """Write the pack of manifest ``ref`` to ``out`` (never over an existing file); returns its pack list."""
    from mlharness import __version__

    if out.exists() or out.is_symlink():
        raise PackError(f"{out} exists; not overwriting it (choose another --out)")
    loaded = load_manifest(ref)
    files, builtin = packed_files(loaded)
    blobs = {name: read_bytes_bounded(path, f"packed file {name}", FILE_LIMIT) for name, path in files.items()}
    assets = _assets(loaded)
    pub = loaded.model.published
    listing = {"pack_version": 1, "mlharness": __version__, "manifest": loaded.path.name,
               "name": loaded.model.name, "version": loaded.model.version,
               "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(blobs.items())},
               "assets": assets, "builtin_dataset": builtin,
               "published": pub.model_dump(mode="json", exclude_none=True) if pub else None}
    blobs["README.md"] = _readme(loaded, assets, builtin).encode()
    listing["files"]["README.md"] = hashlib.sha256(blobs["README.md"]).hexdigest()
    blobs[PACK_LIST] = json.dumps(listing, indent=2).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".part") as tmp:
        with tarfile.open(fileobj=tmp, mode="w:gz") as tf:
            for name, data in blobs.items():
                info = tarfile.TarInfo(f"{loaded.model.name}/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tf.addfile(info, io.BytesIO(data))
        tmp.flush()
        try:
            os.link(tmp.name, out)  # in place whole, and never over a file that appeared meanwhile
        except FileExistsError:
            raise PackError(f"{out} appeared while the pack was written; not overwriting it") from None
    return listing


def unpack(archive: Path, into: Path) -> Path:
    """Check and extract the pack ``archive`` into the new folder ``into``; returns the manifest's path there."""
    if into.is_symlink() or (into.exists() and (not into.is_dir() or any(into.iterdir()))):
        raise PackError(f"{into} exists and is not an empty folder; not unpacking over it")
    into.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{into.name}.unpack-", dir=into.parent))
    try:
        try:
            extract_into(archive, work, LIMITS)
        except AssetError as e:
            raise PackError(f"refusing the pack: {e}") from None
        top = _single_folder(archive, work)
        listing = read_json(top / PACK_LIST, "the pack list", error=PackError)
        _check_listing(archive, top, listing)
        manifest = top / str(listing["manifest"])
        from mlharness.manifest.hooks import check_hooks

        check_hooks(load_manifest(str(manifest)))  # the schema, and every hook compiles; none runs
        if into.exists():
            into.rmdir()  # empty, checked above
        top.rename(into)
        return into / manifest.name
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _single_folder(archive: Path, work: Path) -> Path:
    entries = list(work.iterdir())
    if len(entries) != 1 or not entries[0].is_dir() or entries[0].is_symlink():
        raise PackError(f"{archive}: a pack holds one folder (the manifest's name); found "
                        f"{', '.join(sorted(e.name for e in entries)) or 'nothing'}")
    return entries[0]


def _check_listing(archive: Path, top: Path, listing: Any) -> None:
    if not isinstance(listing, dict) or not isinstance(listing.get("files"), dict) or \
            not isinstance(listing.get("manifest"), str):
        raise PackError(f"{archive}: {PACK_LIST} is not a pack list (files and manifest missing)")
    found = {}
    for p in sorted(top.rglob("*")):
        rel = p.relative_to(top).as_posix()
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise PackError(f"{archive}: refusing '{rel}': a pack holds only plain files and folders")
        if p.is_file() and rel != PACK_LIST:
            found[rel] = hashlib.sha256(read_bytes_bounded(p, f"packed file {rel}", FILE_LIMIT)).hexdigest()
    listed = listing["files"]
    if set(found) != set(listed):
        extra, missing = sorted(set(found) - set(listed)), sorted(set(listed) - set(found))
        raise PackError(f"{archive}: the files differ from its pack list (not listed: {extra or 'none'}; "
                        f"missing: {missing or 'none'})")
    for rel, digest in found.items():
        if listed[rel] != digest:
            raise PackError(f"{archive}: '{rel}' does not match its SHA-256 in the pack list: altered after packing")
    if listing["manifest"] not in found:
        raise PackError(f"{archive}: the manifest '{listing['manifest']}' the pack list names is not in it")
