"""Where things live in a results tree made by ``mlharness submission run``.

    <results>/<system>/<benchmark>/<scenario>/        exactly what the submission checker expects
        accuracy/  performance/run_1/  TEST01/  TEST04/  measurements.json  user.conf  README.md
    <results>/.mlharness/                              everything else, never inside the checked tree
        submission.json                                division, submitter, systems, benchmarks
        runs/<system>/<benchmark>/<scenario>/<step>/   per LoadGen test: mlharness_run.json, step.json, run.log;
                                                       an audit's (TEST0x) also LoadGen's raw logs side by side,
                                                       for the official run_verification.py -c
        failed/<system>/<benchmark>/<scenario>/...     output and logs of failed attempts
        src/<system>/<benchmark>/                      the manifests and configs the runs used
        work/                                          where runs write before their results move into place
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import SettingsError
from mlharness.fileguard import read_text_bounded

ARCHIVE = ".mlharness"
STATE_FILE = "submission.json"
# what mlharness run and StagedDir leave beside a run directory when a run fails or is interrupted
LEFTOVER = re.compile(r"(.+\.failed-\d{8}-\d{6}(-\d+)?|\..+\.partial-.+|\..+\.old-\d+)$")
STATE_LIMIT = 64 << 20  # submission.json: a few KiB per benchmark; a device there must not fill the memory
SYSTEM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def check_system_name(name: str) -> str:
    if not SYSTEM_NAME.fullmatch(name):
        raise SettingsError(f"system name '{name}' must be a directory name: letters, digits, '.', '_', '+', '-'")
    return name


@dataclass
class Tree:
    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    @property
    def archive(self) -> Path:
        return self.root / ARCHIVE

    def scenario_dir(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.root / system / benchmark / scenario

    def record_dir(self, system: str, benchmark: str, scenario: str, step: str) -> Path:
        return self.archive / "runs" / system / benchmark / scenario / step

    def work_dir(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.archive / "work" / system / benchmark / scenario

    def failed_dir(self, system: str, benchmark: str, scenario: str) -> Path:
        return self.archive / "failed" / system / benchmark / scenario

    def src_dir(self, system: str, benchmark: str) -> Path:
        return self.archive / "src" / system / benchmark

    def scenario_dirs(self) -> list[tuple[str, str, str, Path]]:
        """(system, benchmark, scenario, path) of every scenario directory, sorted."""
        out = []
        for system in _folders(self.root):
            for bench in _folders(system):
                for scen in _folders(bench):
                    out.append((system.name, bench.name, scen.name, scen))
        return out

    # ------------------------------------------------------------------------------------------- state
    def read_state(self) -> dict[str, Any]:
        path = self.archive / STATE_FILE
        if not os.path.lexists(path):
            return {}
        text = read_text_bounded(path, "the results tree's state", STATE_LIMIT, error=SettingsError)
        try:
            state = json.loads(text)
        except json.JSONDecodeError as e:
            raise SettingsError(f"{path} is corrupt ({e}); it records the division and submitter of {self.root}")\
                from e
        if not isinstance(state, dict):
            raise SettingsError(f"{path} holds a JSON {type(state).__name__}, not an object; it records the "
                                f"division and submitter of {self.root}")
        return state

    def write_state(self, state: dict[str, Any]) -> None:
        self.archive.mkdir(parents=True, exist_ok=True)
        tmp = self.archive / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2, default=str) + "\n")
        os.replace(tmp, self.archive / STATE_FILE)

    # -------------------------------------------------------------------------------------- leftovers
    def sweep_leftovers(self) -> list[Path]:
        """Move failed or interrupted run folders (``*.failed-*``, ``.*.partial-*``) out of the results tree
        into the archive, so the checked tree holds only results; returns where they went."""
        moved = []
        for dirpath, dirnames, _ in os.walk(self.root):
            here = Path(dirpath)
            if here == self.root and ARCHIVE in dirnames:
                dirnames.remove(ARCHIVE)
            for name in list(dirnames):
                if LEFTOVER.fullmatch(name):
                    dirnames.remove(name)
                    rel = (here / name).relative_to(self.root)
                    target = unique(self.archive / "failed" / rel)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(here / name), str(target))
                    moved.append(target)
        return moved


def _folders(path: Path) -> list[Path]:
    """The visible sub-folders of ``path``; a symlink among them is refused (as
    :func:`mlharness.submission.intake.check_packable` refuses every symlink of a tree it packages)."""
    out = []
    for p in sorted(path.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            raise SettingsError(f"{p} in the results tree is a symlink (to {os.readlink(p)}); a submission holds "
                                f"real files only: replace it with what it points at, or remove it")
        if p.is_dir():
            out.append(p)
    return out


def unique(path: Path) -> Path:
    """``path``, or ``path-1``, ``path-2``... whichever does not exist yet."""
    if not path.exists():
        return path
    n = 1
    while path.with_name(f"{path.name}-{n}").exists():
        n += 1
    return path.with_name(f"{path.name}-{n}")


def replace_dir(new: Path, final: Path, trash: Path) -> None:
    """Put the folder ``new`` at ``final``; an existing ``final`` is moved to ``trash`` (then deleted), so the
    results tree never holds a half-written folder."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        trash = unique(trash)
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.replace(final, trash)
        os.replace(new, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(new, final)


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
