"""Tasks: one package per task, each with the same modules (``dataset``, ``synth``, ``models``, ``metric``, ``cli``
and the reference pre/post-processing helpers its manifests call).

A task registers itself with one line in :data:`TASKS`. Its package's ``__init__`` names its metrics
(``METRICS = {"name": "module:Class"}``) and holds nothing else that costs an import, so listing metrics or
building the command line never imports a framework; its ``cli`` module, when present, adds
``mlharness dataset synth|prepare <task>`` and ``mlharness accuracy <task>``.
"""

from __future__ import annotations

import importlib
import importlib.util

from mlharness.errors import AccuracyError
from mlharness.registry import Registry
from mlharness.tasks import legacy

TASKS = ("demo", "imagenet", "squad", "kits19", "openimages", "coco", "cnndm", "openorca", "generic", "gpt_oss",
         "deepseek_r1", "librispeech")
TASKS += ("coco_t2i",)  # stable-diffusion-xl: captions in, images out
TASKS += ("qwen3_vl",)  # qwen3-vl-235b-a22b: chat prompts with a product image in, JSON text out
TASKS += ("bfcl_v4",)  # qwen3.6-27b: BFCL v4 function calling, one-turn sessions with tools in, tool calls out
TASKS += ("rgat",)  # rgat: a graph input (IGBH), R-GAT in PyTorch Geometric, node labels out
TASKS += ("qwen36",)  # qwen3.6-27b: sessions of turns with tools (BFCL v4 prompts, recorded agentic sessions)
TASKS += ("dlrm_v3",)  # dlrm-v3: a time-ordered stream of jagged user histories in, candidate scores out
TASKS += ("wan22",)  # wan-2.2-t2v-a14b: prompts and a fixed latent in, videos out
TASKS += ("e2e_rag",)  # e2e-rag-qna: FRAMES questions through a pipeline of stages, an LLM judge scores the answers


def _task_entries(attr: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for task in TASKS:
        entries.update(getattr(importlib.import_module(f"{__name__}.{task}"), attr, {}))
    return entries


METRICS = Registry("accuracy metric", _task_entries("METRICS"), AccuracyError)


def cli_modules() -> list[str]:
    """The tasks' ``cli`` modules (a task without commands has none)."""
    return [f"{__name__}.{t}.cli" for t in TASKS if importlib.util.find_spec(f"{__name__}.{t}.cli") is not None]


__getattr__ = legacy.tasks_getattr  # `from mlharness.tasks import vision` (flat layout)
legacy.install()  # `import mlharness.tasks.vision`, `generator: mlharness.tasks.imagenet_synth:...`
