"""Names that become path components (manifest and dataset names, benchmark and system names in results trees,
cache folders): a safe character set and a length limit, so no name can climb out of the folder it is put in
(``../../x``), split into folders (``a/b``), carry a NUL or exceed what a file system accepts."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 128
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
ALLOWED = "letters, digits and . _ + - (starting with a letter or digit)"


def _show(value: str) -> str:
    if len(value) > 40:
        return f"{value[:40]!r}... ({len(value):,} characters)"
    return repr(value)


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a path component, or None when it can."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_NAME_LENGTH:
        return f"is {len(value):,} characters long; at most {MAX_NAME_LENGTH} are allowed ({_show(value)})"
    if "\x00" in value:
        return f"contains a NUL character ({_show(value)}); allowed: {ALLOWED}"
    if "/" in value or "\\" in value:
        return f"contains a path separator ({_show(value)}); it names one folder, allowed: {ALLOWED}"
    if not SAFE_NAME.fullmatch(value):
        return f"{_show(value)} is outside the safe set: {ALLOWED}"
    return None


def safe_name(value: str) -> str:
    """A pydantic validator: ``value`` unchanged, or ValueError naming the problem."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"the name is used as a folder name and {problem}")
    return value


def check_path_component(value: str, what: str) -> str:
    """``value`` unchanged, or a SettingsError naming ``what`` (a command-line option)."""
    from mlharness.errors import SettingsError

    problem = name_problem(value)
    if problem is not None:
        raise SettingsError(f"{what}: the name is used as a folder name and {problem}")
    return value
