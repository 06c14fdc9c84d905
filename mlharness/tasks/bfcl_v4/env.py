"""bfcl-eval's environment: where its Python is, whether it can score, and how ``mlharness accuracy bfcl-v4
--setup`` makes one.

bfcl-eval pins numpy 1.26.4 and filelock 3.20.0, so its AST checker runs in a virtual environment of its own, as a
subprocess (``checker.py``). Its Python is, in this order: the metric option ``bfcl_python`` (or ``--bfcl-python``),
``MLHARNESS_BFCL_PYTHON``, then the environment ``--setup`` makes in mlharness's cache
(``<cache>/bfcl-eval-<version>/``). A run that will score BFCL v4 checks that Python before the model loads
(:func:`check_python`, once per process), so a missing environment costs seconds, not the hours of a real run.

The pins are those of ``.ci/run``'s ``.ci-bfcl`` block (a test keeps the two equal): bfcl-eval without the
dependencies the checker never imports (sentence-transformers and faiss-cpu, which pull torch, serve its
retrieval-based categories), then the ones it does, and soundfile, which qwen-agent needs without declaring it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mlharness.errors import AccuracyError

PYTHON_ENV = "MLHARNESS_BFCL_PYTHON"  # the Python of the environment that has bfcl-eval (it holds the real data)
BFCL_EVAL_VERSION = "2026.3.23"
BFCL_EVAL = f"bfcl-eval=={BFCL_EVAL_VERSION}"  # installed with --no-deps
DEPENDENCIES = (
    "requests", "tqdm", "numpy==1.26.4", "pandas", "huggingface_hub", "pydantic>=2.8.2", "python-dotenv>=1.0.1",
    "tree_sitter==0.21.3", "tree-sitter-java==0.21.0", "tree-sitter-javascript==0.21.4", "openai>=1.86.0",
    "mistralai==1.7.0", "anthropic>=0.75.0", "cohere==5.18.0", "typer>=0.12.5", "tabulate>=0.9.0",
    "datamodel-code-generator==0.25.7", "google-genai>=1.52.0", "qwen-agent", "mpmath==1.3.0", "tenacity>=8.5.0",
    "writer-sdk>=2.1.0", "overrides", "boto3", "beautifulsoup4", "html2text", "rank_bm25==0.2.2",
    "google-search-results", "networkx==3.3", "filelock==3.20.0", "soundfile",
)
CHECK_TIMEOUT_S = 180.0  # importing the AST checker takes a few seconds (tree-sitter, pandas)
SETUP_TIMEOUT_S = 3600.0
# what the checker imports, and the version it reports (checker.py)
_PROBE = ("from importlib.metadata import version; import bfcl_eval.eval_checker.ast_eval.ast_checker; "
          "print(version('bfcl-eval'))")
HOW_TO_FIX = (f"run 'mlharness accuracy bfcl-v4 --setup' (it makes the environment in mlharness's cache, which "
              f"is then found by itself) or set {PYTHON_ENV} to the Python of an environment with {BFCL_EVAL}")


def default_venv() -> Path:
    """The environment ``--setup`` makes: ``<mlharness cache>/bfcl-eval-<version>``."""
    from mlharness.manifest.assets import cache_dir

    return cache_dir() / f"bfcl-eval-{BFCL_EVAL_VERSION}"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def find_python(explicit: str | None = None) -> str | None:
    """bfcl-eval's Python: ``explicit`` (an option), else ``MLHARNESS_BFCL_PYTHON``, else the cache's environment
    where it exists; None when there is none."""
    if explicit:
        return str(explicit)
    value = os.environ.get(PYTHON_ENV, "").strip()
    if value:
        return value
    cached = venv_python(default_venv())
    return str(cached) if cached.is_file() else None


def where_from(explicit: str | None = None) -> str:
    """Which of the three ways named the Python :func:`find_python` returns (for messages)."""
    if explicit:
        return "the option bfcl_python"
    if os.environ.get(PYTHON_ENV, "").strip():
        return PYTHON_ENV
    return f"the environment in mlharness's cache ({default_venv()})"


@functools.lru_cache(maxsize=8)
def check_python(python: str) -> str:
    """bfcl-eval's version as ``python`` imports it with the AST checker; raises AccuracyError naming what is wrong
    when it cannot, or when it is not the pinned version. Cached per process: the import takes seconds."""
    if os.sep in python:
        python = os.path.abspath(python)
    with tempfile.TemporaryDirectory(prefix="mlharness-bfcl-check-") as tmp:
        # bfcl-eval makes result folders under BFCL_PROJECT_ROOT when imported: keep them in the temporary folder
        try:
            done = subprocess.run([python, "-I", "-c", _PROBE], cwd=tmp, env={**os.environ, "BFCL_PROJECT_ROOT": tmp},
                                  capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise AccuracyError(f"{python} did not import bfcl-eval's AST checker in {CHECK_TIMEOUT_S:g} s") from e
        except OSError as e:
            raise AccuracyError(f"{python} cannot be run: {e}") from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise AccuracyError(f"{python} cannot import bfcl-eval's AST checker: {tail[0]}")
    version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if version != BFCL_EVAL_VERSION:
        raise AccuracyError(f"{python} has bfcl-eval {version or '(unknown version)'}, not the pinned "
                            f"{BFCL_EVAL_VERSION} the reference scores with")
    return version


def require_python(explicit: str | None, who: str) -> str:
    """The Python that will score, checked now; AccuracyError saying what is missing and how to fix it."""
    python = find_python(explicit)
    if python is None:
        raise AccuracyError(f"{who}: scoring needs bfcl-eval's AST checker, and no environment has it: "
                            f"{PYTHON_ENV} is not set and {default_venv()} does not exist; {HOW_TO_FIX}")
    try:
        check_python(python)
    except AccuracyError as e:
        raise AccuracyError(f"{who}: scoring needs bfcl-eval's AST checker: {e} (named by {where_from(explicit)}); "
                            f"{HOW_TO_FIX}") from e
    return python


def setup_commands(venv: Path, base_python: str = sys.executable) -> list[list[str]]:
    """The commands that make ``venv``: a virtual environment, bfcl-eval without its dependencies, then the ones
    its AST checker imports (the pins of .ci/run's .ci-bfcl block)."""
    pip = [str(venv_python(venv)), "-m", "pip", "install", "-q"]
    return [[base_python, "-m", "venv", str(venv)], [*pip, "--no-deps", BFCL_EVAL], [*pip, *DEPENDENCIES]]


def setup(venv: Path | None = None, say=print) -> Path:  # noqa: ANN001 - a print-like callable
    """Make bfcl-eval's environment (downloads from PyPI; minutes) and check it; returns its Python."""
    venv = Path(venv) if venv is not None else default_venv()
    for command in setup_commands(venv):
        say("$ " + " ".join(command))
        try:
            subprocess.run(command, check=True, timeout=SETUP_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            raise AccuracyError(f"bfcl_v4: making bfcl-eval's environment in {venv} failed: {e}") from e
    python = venv_python(venv)
    check_python.cache_clear()
    check_python(str(python))
    return python
