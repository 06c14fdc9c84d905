"""``framework.options`` checked before a framework sees them: errors name the manifest and the field
(``framework.options.<name>``), and an option that makes the framework write a file may only point inside
mlharness's cache.

A manifest is untrusted input: an option such as onnxruntime's ``optimized_model_filepath`` would otherwise let
it overwrite any file the user can write, and the framework follows a symbolic link at that path without asking.
Results go through the run's staging folder, so the cache is the one place a framework may write to.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mlharness.errors import ManifestError, PredictorError
from mlharness.predictors.base import PredictorConfig

MAX_THREADS = max(1024, 8 * (os.cpu_count() or 1))
"""Most threads a thread-count option may ask for (the run checks the same bound earlier, naming the field): more
is a typo, and a pool that large can abort the process."""


class OptionError(ManifestError, PredictorError):
    """A ``framework.options`` value the framework would refuse or misuse: a manifest error (it names the file and
    field) that is also the predictor's error, for callers that catch either."""


def option_error(config: PredictorConfig, name: str | None, message: str) -> OptionError:
    """An OptionError naming the manifest and ``framework.options`` (``.name`` when one option is at fault)."""
    return OptionError(config.manifest_path, f"framework.options.{name}" if name else "framework.options", message)


def unknown_options(config: PredictorConfig, framework: str, known: set[str]) -> None:
    unknown = set(config.options) - known
    if unknown:
        raise option_error(config, None, f"unknown {framework} option(s) {sorted(unknown)}; "
                                         f"known: {', '.join(sorted(known))}")


def int_option(config: PredictorConfig, name: str, low: int = 0, high: int = MAX_THREADS) -> int:
    """The integer option ``name``, within [low, high]."""
    value = config.options[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise option_error(config, name, f"expected an integer from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise option_error(config, name, f"{value} is out of range: expected {low} to {high}")
    return value


def written_file_option(config: PredictorConfig, name: str) -> str:
    """Where the option ``name`` makes the framework write a file, inside the cache: a relative path is taken
    under ``<cache>/framework-output/<model>/``; an absolute one must already lie inside the cache. Anything else
    (outside the cache, through a symbolic link that leaves it, onto something not a regular file) is refused."""
    from mlharness.manifest.assets import cache_dir

    value = config.options[name]
    if not isinstance(value, str) or not value.strip():
        raise option_error(config, name, f"expected a file path, got {value!r}")
    cache = cache_dir()
    base = cache / "framework-output" / _safe(config.model_name or "model")
    raw = Path(value).expanduser()
    target = (raw if raw.is_absolute() else base / raw).resolve()  # symbolic links followed: where it lands
    allowed = (f"a relative path (written under {base}) or an absolute path inside the cache {cache} "
               "($MLHARNESS_CACHE); the framework writes this file, so it may not point anywhere else")
    if not target.is_relative_to(cache) or target == cache:
        raise option_error(config, name, f"{value!r} resolves to {target}, outside mlharness's cache; give {allowed}")
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise option_error(config, name, f"{target} exists and is not a regular file; give {allowed}")
    target.parent.mkdir(parents=True, exist_ok=True)
    return str(target)


def _safe(name: str) -> str:
    """A model name as one path component."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return cleaned or "model"
