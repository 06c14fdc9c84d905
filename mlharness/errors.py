"""One exception root for everything mlharness reports to a user.

The CLI maps these to exit codes once; anything that is *not* an ``MLHarnessError`` is a bug and is shown
with its traceback.
"""

from __future__ import annotations


class MLHarnessError(Exception):
    """Base of every error that is the user's input or environment, not a bug in mlharness."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ManifestError(MLHarnessError):
    """A manifest (model or dataset) is malformed: names the file, the field path and what was expected."""

    def __init__(self, path: str | None, field: str | None, message: str):
        self.path = str(path) if path is not None else None
        self.field = field
        where = self.path or "<manifest>"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")


class HookError(MLHarnessError):
    """A manifest hook failed to compile or raised while running."""

    def __init__(self, hook: str, manifest: str | None, message: str, line: int | None = None):
        self.hook = hook
        self.manifest = manifest
        self.line = line
        where = f"hook '{hook}'"
        if manifest:
            where += f" of {manifest}"
        if line is not None:
            where += f", line {line}"
        super().__init__(f"{where}: {message}")


class PredictorError(MLHarnessError):
    """The framework failed to load or run the model."""


class AssetError(MLHarnessError):
    """A model or data asset could not be fetched, or its checksum does not match."""


class DatasetError(MLHarnessError):
    """The dataset is missing, malformed, or does not match what the manifest declares."""


class SettingsError(MLHarnessError):
    """A LoadGen setting, user.conf line, scenario or benchmark name is wrong."""


class RunFailed(MLHarnessError):
    """The timed path failed during a LoadGen test; the run produced no result."""

    exit_code = 3


class AccuracyError(MLHarnessError):
    """The accuracy log could not be scored."""


class AgentError(MLHarnessError):
    """A remote agent failed or returned an error status."""

    def __init__(self, message: str, status: str | None = None):
        self.status = status
        super().__init__(message if status is None else f"{message} (status {status})")


class AuditFailed(MLHarnessError):
    """A compliance audit did not pass."""

    exit_code = 4


def suggest(name: str, known: list[str] | tuple[str, ...] | set[str]) -> str:
    """'did you mean X? known: a, b, c' for lookup errors."""
    import difflib

    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"{hint} Known: {', '.join(known)}."
