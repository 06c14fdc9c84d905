"""Fetch, cache, verify and unpack the files a manifest points at (model graphs, archives).

Remote assets are cached under :func:`cache_dir` keyed by their URL, and every use re-verifies the checksum:
a benchmark result is only meaningful if the graph is byte-for-byte the one the manifest names, and a cached
file can rot or be edited after it was downloaded. Downloads and extractions go to a temporary name first and
are renamed into place, so an interrupted fetch never leaves something that looks complete.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from mlharness.errors import AssetError
from mlharness.fileguard import check_regular_file, hash_file
from mlharness.manifest.archives import ArchiveLimits, extract_into

log = logging.getLogger(__name__)

_CHUNK = 1 << 20  # 1 MiB: bounded memory for multi-GB graphs
_TIMEOUT_S = 60.0
_URL_SCHEMES = ("http", "https", "file")
_HEX_LEN = {"md5": 32, "sha256": 64}
_HEX_DIGITS = frozenset("0123456789abcdef")


def cache_dir() -> Path:
    """Where downloads live: $MLHARNESS_CACHE, else $XDG_CACHE_HOME/mlharness, else ~/.cache/mlharness."""
    if os.environ.get("MLHARNESS_CACHE"):
        root = Path(os.environ["MLHARNESS_CACHE"]).expanduser()
    elif os.environ.get("XDG_CACHE_HOME"):
        root = Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "mlharness"
    else:
        root = Path.home() / ".cache" / "mlharness"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def parse_checksum(checksum: str) -> tuple[str, str]:
    """Split 'sha256:<hex>' / 'md5:<hex>' / bare hex into (algorithm, lowercase hex).

    Bare hex is accepted because MLHarness manifests write bare md5 digests; its length picks the algorithm.
    """
    text = checksum.strip().lower()
    if ":" in text:
        algorithm, digest = (part.strip() for part in text.split(":", 1))
    else:
        digest = text
        algorithm = next((name for name, n in _HEX_LEN.items() if n == len(digest)), "")
    if algorithm not in _HEX_LEN or len(digest) != _HEX_LEN[algorithm] or not set(digest) <= _HEX_DIGITS:
        raise AssetError(
            f"invalid checksum {checksum!r}: expected 'sha256:<64 hex digits>', 'md5:<32 hex digits>' "
            "or bare hex (32 digits = md5, 64 = sha256)"
        )
    return algorithm, digest


def file_digest(path: Path, algorithm: str, what: str = "file") -> str:
    """Hex digest of a regular file, read in 1 MiB chunks so large graphs are never loaded whole. A FIFO or a
    device is refused before it is opened: hashing one would wait or read forever."""
    return hash_file(path, what, algorithm, error=AssetError)


def verify_checksum(path: Path, checksum: str | None) -> None:
    """Raise AssetError unless `path` matches `checksum`; no checksum means nothing to check."""
    _verify(Path(path), checksum)


def _verify(path: Path, checksum: str | None, what: str | None = None, advice: str = "") -> None:
    """verify_checksum with a custom subject (`what`) and a hint on how to recover (`advice`)."""
    if not checksum:
        return
    algorithm, expected = parse_checksum(checksum)
    what = what or str(path)
    if path.is_dir():
        raise AssetError(f"{what}: a checksum was given but {path} is a directory, not a file")
    actual = file_digest(path, algorithm, what if what != str(path) else "file")
    if actual != expected:
        raise AssetError(
            f"{what}: {algorithm} checksum mismatch: expected {expected}, got {actual}" + advice
        )


def resolve_asset(
    graph_path: str,
    base_url: str | None = None,
    checksum: str | None = None,
    is_archive: bool = False,
    manifest_dir: Path | None = None,
    progress: bool = False,
    archive_limits: dict[str, float] | None = None,
) -> Path:
    """Turn a manifest's asset reference into a verified absolute local path (a folder if `is_archive`, unpacked
    within `archive_limits`: max_bytes, max_files, max_ratio over the defaults and environment)."""
    url = _remote_url(graph_path, base_url)
    path = _fetch(url, checksum, progress) if url is not None else _local(graph_path, checksum, manifest_dir)
    if is_archive:
        check_regular_file(path, f"archive '{graph_path}' ({path})", error=AssetError)
        return _extract(path, ArchiveLimits.from_env(archive_limits))
    return path


def _remote_url(graph_path: str, base_url: str | None) -> str | None:
    """The URL to fetch, or None when the asset is a local path."""
    if urllib.parse.urlsplit(graph_path).scheme.lower() in _URL_SCHEMES and "://" in graph_path:
        return graph_path
    if base_url:
        return base_url.rstrip("/") + "/" + graph_path.lstrip("/")
    return None


def _local(graph_path: str, checksum: str | None, manifest_dir: Path | None) -> Path:
    """Resolve a local path against the manifest's folder (so manifests are relocatable) and verify it."""
    path = Path(graph_path).expanduser()
    if not path.is_absolute():
        path = Path(manifest_dir).expanduser() / path if manifest_dir is not None else Path.cwd() / path
    try:
        path = path.resolve()
    except (OSError, RuntimeError) as e:  # Python raises RuntimeError for a symlink loop
        raise AssetError(f"asset '{graph_path}' cannot be resolved (looked for {path}): {_reason(e)}") from None
    if not path.exists():
        raise AssetError(f"asset '{graph_path}' does not exist (looked for {path})")
    if not path.is_dir():  # a folder is a model too (a SavedModel, a checkpoint): anything else must be a file
        check_regular_file(path, f"asset '{graph_path}' ({path})", error=_kind_error)
    _verify(path, checksum)
    return path


def _kind_error(message: str) -> AssetError:
    return AssetError(message.replace("; give the path of a regular file", "; a model asset must be a regular "
                                      "file or a folder"))


def _reason(e: BaseException) -> str:
    if isinstance(e, RuntimeError) or getattr(e, "errno", None) == errno.ELOOP:
        return "a loop of symbolic links"
    return getattr(e, "strerror", None) or str(e)


def _fetch(url: str, checksum: str | None, progress: bool) -> Path:
    """Return the cached copy of `url`, downloading it first if needed; verified on every call."""
    folder = cache_dir() / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name).replace(os.sep, "_")
    target = folder / (name if name not in ("", ".", "..") else "asset")
    if target.is_file():
        # Never silently re-download: a changed cached file means something is wrong and the user should know.
        _verify(target, checksum, f"cached copy of {url}", f"; delete {target} to download it again")
        log.debug("using cached %s for %s", target, url)
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".partial-", dir=folder)
    tmp = Path(tmp_name)
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                _download(url, out, progress)
        except urllib.error.HTTPError as e:
            e.close()  # it holds the open response; otherwise the socket lingers until GC
            raise AssetError(f"cannot download {url}: HTTP {e.code} {e.reason}") from e
        except urllib.error.URLError as e:
            raise AssetError(f"cannot download {url}: {e.reason}") from e
        except (OSError, http.client.HTTPException) as e:
            raise AssetError(f"cannot download {url}: {type(e).__name__}: {e}") from e
        _verify(tmp, checksum, f"download of {url}")
        os.replace(tmp, target)
    finally:
        # Also runs on KeyboardInterrupt: a partial download must never stay behind in the cache.
        tmp.unlink(missing_ok=True)
    log.info("downloaded %s to %s", url, target)
    return target


def _download(url: str, out: BinaryIO, progress: bool) -> None:
    """Stream `url` into `out`, logging progress every ~10% when asked and the size is known."""
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        done, next_report = 0, 0.1
        while chunk := resp.read(_CHUNK):
            out.write(chunk)
            done += len(chunk)
            if progress and total and done / total >= next_report:
                log.info("downloading %s: %d%% (%d of %d bytes)", url, 100 * done // total, done, total)
                next_report = (done / total // 0.1 + 1) * 0.1
        if total is not None and done != total:
            # Needed: HTTPResponse.read(n) returns b"" (no error) when the server hangs up early.
            raise http.client.IncompleteRead(b"", total - done)


def _extract(archive: Path, limits: ArchiveLimits | None = None) -> Path:
    """Unpack `archive` into `<archive>.extracted/` (once; reused afterwards) within `limits` (size, entries,
    compression ratio) and return that folder."""
    dest = archive.with_name(archive.name + ".extracted")
    if dest.is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=archive.parent))
    try:
        extract_into(archive, tmp, limits)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # another process may have won the race; otherwise it is a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("extracted %s to %s", archive, dest)
    return dest


