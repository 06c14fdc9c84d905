"""Unpack a model archive (zip, tar, tar.gz) within limits: total size, number of entries, compression ratio.

A zip or gzip "bomb" is a few kilobytes that expand to gigabytes; extracted unchecked it fills the disk beside
the cache. The limits are checked from the archive's headers before anything is written, and again while
writing, since a header can lie about the size of what follows. The defaults let real checkpoints through (an
LLM's weights are tens of GiB, a few hundred files, compressed at most a few times) and are set with
environment variables for the rare archive beyond them.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mlharness.errors import AssetError
from mlharness.fileguard import check_regular_file, open_regular

_CHUNK = 1 << 20
_RATIO_FLOOR = 1 << 20  # below 1 MiB expanded, any ratio is harmless (a small file of zeros compresses 1000:1)


@dataclass(frozen=True)
class ArchiveLimits:
    """Most an archive may expand to: bytes in all, entries, and expanded bytes per archive byte."""

    max_bytes: int = 64 << 30
    max_files: int = 100_000
    max_ratio: float = 200.0

    ENV = {"max_bytes": "MLHARNESS_ARCHIVE_MAX_BYTES", "max_files": "MLHARNESS_ARCHIVE_MAX_FILES",
           "max_ratio": "MLHARNESS_ARCHIVE_MAX_RATIO"}

    @classmethod
    def from_env(cls, overrides: dict[str, Any] | None = None) -> ArchiveLimits:
        """The defaults, then the environment variables, then ``overrides`` (e.g. from a manifest entry)."""
        values: dict[str, Any] = {}
        for name, var in cls.ENV.items():
            text = os.environ.get(var, "").strip()
            if text:
                values[name] = _positive(text, var, float if name == "max_ratio" else int)
        for name, value in (overrides or {}).items():
            if name not in cls.ENV:
                raise AssetError(f"unknown archive limit '{name}'; known: {', '.join(cls.ENV)}")
            values[name] = _positive(str(value), name, float if name == "max_ratio" else int)
        return cls(**values)

    def env_hint(self, name: str) -> str:
        return f"set {self.ENV[name]} to raise the limit if the archive is genuine"


def _positive(text: str, where: str, kind: type) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise AssetError(f"{where}={text!r}: expected a positive {'number' if kind is float else 'integer'}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise AssetError(f"{where}={text!r}: expected a positive finite {'number' if kind is float else 'integer'}")
    return value


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


class _Budget:
    """What has been written so far, against the limits; every error names the archive and the limit."""

    def __init__(self, archive: Path, limits: ArchiveLimits):
        self.archive, self.limits = archive, limits
        self.size = max(1, archive.stat().st_size)
        self.files = 0
        self.written = 0

    def check_totals(self, total: int, files: int) -> None:
        """Refuse what the headers declare, before writing."""
        a, lim = self.archive, self.limits
        if files > lim.max_files:
            raise AssetError(f"{a}: refusing to extract {files:,} entries, more than the limit of "
                             f"{lim.max_files:,} ({lim.env_hint('max_files')})")
        if total > lim.max_bytes:
            raise AssetError(f"{a}: refusing to extract {_mib(total)}, more than the limit of "
                             f"{_mib(lim.max_bytes)} ({lim.env_hint('max_bytes')})")
        if total > _RATIO_FLOOR and total / self.size > lim.max_ratio:
            raise AssetError(f"{a}: refusing to extract {_mib(total)} from a {_mib(self.size)} archive: it expands "
                             f"{total / self.size:,.0f} times, more than the limit of {lim.max_ratio:g} (an "
                             f"archive bomb?; {lim.env_hint('max_ratio')})")

    def add_file(self) -> None:
        self.files += 1
        self.check_totals(self.written, self.files)

    def add_bytes(self, n: int) -> None:
        self.written += n
        self.check_totals(self.written, self.files)


def check_member(archive: Path, name: str) -> None:
    """Refuse archive members that would escape the extraction folder."""
    posix = name.replace("\\", "/")
    parts = PurePosixPath(posix).parts
    if posix.startswith("/") or ".." in parts or (parts and len(parts[0]) == 2 and parts[0][1] == ":"):
        raise AssetError(f"{archive}: refusing to extract member '{name}': absolute path or '..' component")


def extract_into(archive: Path, dest: Path, limits: ArchiveLimits | None = None) -> None:
    """Unpack ``archive`` into the empty folder ``dest`` within ``limits``; AssetError otherwise (``dest`` may
    then hold part of it: the caller removes it)."""
    limits = limits or ArchiveLimits.from_env()
    # zipfile and tarfile probe the path themselves: a FIFO would block them
    check_regular_file(archive, "archive", error=AssetError)
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, dest, _Budget(archive, limits))
        elif tarfile.is_tarfile(archive):
            _extract_tar(archive, dest, _Budget(archive, limits))
        else:
            raise AssetError(f"{archive} is not a .tar, .tar.gz, .tgz or .zip archive")
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise AssetError(f"cannot extract {archive}: {type(e).__name__}: {e}") from e


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> None:
    with open_regular(archive, "archive", error=AssetError) as raw, zipfile.ZipFile(raw) as zf:
        infos = zf.infolist()
        for info in infos:
            check_member(archive, info.filename)
        budget.check_totals(sum(i.file_size for i in infos), len(infos))
        for info in infos:
            budget.add_file()
            target = dest / PurePosixPath(info.filename.replace("\\", "/"))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # O_EXCL | O_NOFOLLOW: a name given twice, or one made a link by an earlier entry, is not written through
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                done = 0
                while chunk := src.read(_CHUNK):
                    done += len(chunk)
                    if done > info.file_size:
                        raise AssetError(f"{archive}: member '{info.filename}' expands beyond the "
                                         f"{info.file_size:,} bytes its header declares; refusing the archive")
                    budget.add_bytes(len(chunk))
                    out.write(chunk)


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> None:
    # Stream mode reads each header as it comes, so a compressed bomb is never decompressed just to list it;
    # the filter sees every member before it is written, and tarfile writes exactly the size its header gives.
    data_filter = getattr(tarfile, "data_filter", None)

    def guard(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        check_member(archive, member.name)
        if member.issym() or member.islnk():
            check_member(archive, member.linkname)
        if member.isdev():
            raise AssetError(f"{archive}: refusing to extract device member '{member.name}'")
        budget.add_file()
        budget.add_bytes(member.size if member.isfile() else 0)
        return data_filter(member, path) if data_filter is not None else member

    with open_regular(archive, "archive", error=AssetError) as raw, tarfile.open(fileobj=raw, mode="r|*") as tf:
        if data_filter is not None:
            tf.extractall(dest, filter=guard)
        else:  # Python without extraction filters: the guard is called by hand, member by member
            for member in tf:
                tf.extract(guard(member, str(dest)), dest)
