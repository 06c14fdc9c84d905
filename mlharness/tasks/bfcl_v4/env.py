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

from mlharness.tasks.side_env import SideEnv, venv_python

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
HOW_TO_FIX = (f"run 'mlharness accuracy bfcl-v4 --setup' (it makes the environment in mlharness's cache, which "
              f"is then found by itself) or set {PYTHON_ENV} to the Python of an environment with {BFCL_EVAL}")
# what the checker imports, and the version it reports (checker.py); bfcl-eval makes result folders under
# BFCL_PROJECT_ROOT when imported: the probe keeps them in its temporary folder
ENV = SideEnv(package="bfcl-eval", version=BFCL_EVAL_VERSION, env_var=PYTHON_ENV, option="bfcl_python",
              venv_name=f"bfcl-eval-{BFCL_EVAL_VERSION}",
              probe=("from importlib.metadata import version; import bfcl_eval.eval_checker.ast_eval.ast_checker; "
                     "print(version('bfcl-eval'))"),
              installs=(("--no-deps", BFCL_EVAL), DEPENDENCIES), what="bfcl-eval's AST checker",
              needs="scoring needs bfcl-eval's AST checker", how_to_fix=HOW_TO_FIX, owner="bfcl_v4",
              check_timeout_s=CHECK_TIMEOUT_S, setup_timeout_s=SETUP_TIMEOUT_S,
              pinned_note=" the reference scores with", scratch_env="BFCL_PROJECT_ROOT")
# the environment's functions, as the metric, the dataset, the CLI and the tests call them
default_venv, find_python, where_from = ENV.default_venv, ENV.find_python, ENV.where_from
check_python = ENV.check_python
require_python, setup_commands, setup = ENV.require_python, ENV.setup_commands, ENV.setup
__all__ = ["BFCL_EVAL", "BFCL_EVAL_VERSION", "DEPENDENCIES", "ENV", "HOW_TO_FIX", "PYTHON_ENV", "check_python",
           "default_venv", "find_python", "require_python", "setup", "setup_commands", "venv_python", "where_from"]
