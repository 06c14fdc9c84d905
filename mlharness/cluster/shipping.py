"""What a run job carries to a node that shares no file system with the driver: the user's manifest (with the
hook files and small assets beside it), a user.conf, an audit config. Built-in manifests are named, not shipped:
every node has the same mlharness (so are the default user.conf files: a run treats a shipped copy as stated,
and would not size itself). Datasets are never shipped (too large): a ``--dataset-path`` must exist on
the node at the same path.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlharness import fileguard
from mlharness.cluster.jobs import Constraints, RunJob
from mlharness.errors import SettingsError
from mlharness.paths import USER_CONF_DIR

SIBLING_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".txt", ".conf", ".config")
MAX_SIBLING_BYTES = 1 << 20  # a sibling larger than this (a model file, a dataset) is not shipped
MAX_SHIPPED_BYTES = 32 << 20
# `mlharness run` flags naming a file the node may lack, and the folder (in the run's working folder) it goes to
FILE_FLAGS = {"--manifest": "manifest", "--dataset": "dataset", "--user-conf": "conf", "--audit-config": "audit"}


def is_builtin(ref: str) -> bool:
    """A manifest reference naming a built-in manifest (``resnet50-oracle``, ``demo@onnxruntime``), no file."""
    from mlharness.manifest.loader import find_builtin, split_reference

    if Path(ref).is_file():
        return False
    name, _ = split_reference(ref)
    return find_builtin(str(name)) is not None


def builtin_name(path: Path) -> str | None:
    """The name of a built-in manifest given by its file in this installation (the nodes' may lie elsewhere)."""
    from mlharness.manifest.loader import find_builtin, manifest_dirs

    path = path.resolve()
    for root in manifest_dirs():
        found = find_builtin(path.stem)
        if path.is_relative_to(root.resolve()) and found is not None and found.resolve() == path:
            return path.stem
    return None


def _read(path: Path) -> bytes:
    """A file a job ships: a regular file of at most the shipping bound, refused naming it otherwise."""
    return fileguard.read_bytes_bounded(path, "a file shipped to the cluster's nodes", MAX_SHIPPED_BYTES,
                                        error=SettingsError)


def manifest_files(path: Path, folder: str) -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """A manifest file and the small files beside it (hooks, labels, dataset manifests), shipped under
    ``folder``; returns the relative path the run names and the files."""
    path = path.resolve()
    files = [(f"{folder}/{path.name}", _read(path))]
    total = len(files[0][1])
    for sibling in sorted(path.parent.iterdir()):
        if sibling == path or not sibling.is_file() or sibling.suffix not in SIBLING_SUFFIXES:
            continue
        size = sibling.stat().st_size
        if size > MAX_SIBLING_BYTES:
            continue
        total += size
        if total > MAX_SHIPPED_BYTES:
            raise SettingsError(f"the files beside {path} exceed {MAX_SHIPPED_BYTES >> 20} MB: keep the manifest "
                                f"in a folder of its own to run it on a cluster")
        files.append((f"{folder}/{sibling.name}", _read(sibling)))
    return f"{folder}/{path.name}", tuple(files)


ORIGIN_ENV = "MLHARNESS_MANIFEST_ORIGIN"
"""Set on a run whose manifest was shipped: JSON ``{"path", "sha256"}`` of the user's own file, which the run's
record keeps (``manifest.path``) instead of the node's temporary copy, so the driver can load it again (TEST01's
verification reads the accuracy run's manifest) and the record names what the user ran."""


def origin_env(path: Path, shipped: tuple[tuple[str, bytes], ...]) -> tuple[str, str]:
    """The environment entry naming a shipped manifest's original file and the digest of the bytes shipped."""
    import hashlib

    return ORIGIN_ENV, json.dumps({"path": str(path.resolve()), "sha256": hashlib.sha256(shipped[0][1]).hexdigest()})


def job_from_argv(argv: list[str], key: str, dest: str, constraints: Constraints | None = None,
                  timeout_s: float | None = None, meta: dict | None = None) -> RunJob:
    """A local child's command line (``<python> -m mlharness.cli run ... --output DIR ...``) as a run job: the
    program and ``--output`` dropped (the executor gives the run its folder), every file a flag names shipped
    and named by its path in the run's working folder."""
    args = list(argv)
    if len(args) >= 3 and args[1:3] == ["-m", "mlharness.cli"]:
        args = args[3:]
    out: list[str] = []
    files: list[tuple[str, bytes]] = []
    env: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if flag == "--output":
            i += 2
            continue
        if flag == "--manifest" and value is not None and Path(value).is_file() and builtin_name(Path(value)):
            out += [flag, str(builtin_name(Path(value)))]
            i += 2
            continue
        if flag == "--user-conf" and value is not None and Path(value).resolve().parent == USER_CONF_DIR.resolve():
            i += 2  # a built-in default: the node's own is the same file, and a run treats it as no user.conf
            continue  # (calibration then sizes the run, as it does here; a shipped copy would count as stated)
        if flag in FILE_FLAGS and value is not None and Path(value).is_file():
            folder = f"{FILE_FLAGS[flag]}{len(files)}"
            if flag in ("--manifest", "--dataset"):
                rel, shipped = manifest_files(Path(value), folder)
                if flag == "--manifest":
                    env.append(origin_env(Path(value), shipped))
            else:
                rel, shipped = f"{folder}/{Path(value).name}", ((f"{folder}/{Path(value).name}",
                                                                  _read(Path(value))),)
            files += shipped
            out += [flag, rel]
            i += 2
            continue
        out.append(flag)
        i += 1
    return RunJob(key=key, argv=tuple(out), dest=dest, constraints=constraints or Constraints(), timeout_s=timeout_s,
                  env=tuple(env), files=tuple(files), meta=dict(meta or {}))
