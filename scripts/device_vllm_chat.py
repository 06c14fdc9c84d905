"""On a GPU machine with vLLM: the in-process vllm predictor answers chat prompts with images (the tiny random
LLaVA of tiny-vlm and the tiny random Qwen3-VL), text out, prefix caching off. No LoadGen: the predictor is driven
directly, as the token SUT drives it. Prints one line per sample and a verdict; exit status 0 when every sample of
both models answered text."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


class Stream:
    def __init__(self) -> None:
        self.ids, self.response, self.error, self.first_at = None, None, None, None
        self.done_event = threading.Event()

    def first(self, ids):
        self.first_at = self.first_at or time.perf_counter()

    def done(self, ids, response=None):
        self.ids, self.response = np.asarray(ids), response
        self.done_event.set()

    def fail(self, error):
        self.error = error
        self.done_event.set()


def run(manifest_text: str, model_dir: Path, prompts) -> bool:
    from mlharness.manifest.loader import load_manifest
    from mlharness.predictors.generative import TokenRequest
    from mlharness.run.factory import make_predictor

    path = model_dir.parent / f"{model_dir.name}.yaml"
    path.write_text(manifest_text)
    loaded = load_manifest(str(path))
    predictor = make_predictor(loaded, model_dir, 4, device="cuda")
    streams = [Stream() for _ in prompts]
    start = time.perf_counter()
    predictor.submit([TokenRequest(p.index, p) for p in prompts], streams)
    ok = predictor.drain(timeout_s=300)
    for p, s in zip(prompts, streams, strict=True):
        text = bytes(s.response).decode("utf-8") if s.response is not None else None
        print(f"  sample {p.index}: error={s.error!r} tokens={None if s.ids is None else s.ids.size} text={text!r}")
    print(f"  {len(prompts)} samples in {time.perf_counter() - start:.2f} s; describe: {predictor.describe()}")
    predictor.close()
    return ok and all(s.error is None and s.response is not None and len(s.response) > 0 for s in streams)


def main() -> int:
    import vllm

    print("vllm", vllm.__version__)
    from mlharness.predictors.chat import parse_chat
    from mlharness.tasks.generic import vlm, vlm_data

    root = Path(tempfile.mkdtemp(prefix="vlm-"))
    data = vlm_data.write_vlm_questions(root / "data", count=4)
    rows = vlm_data.read_questions(data)
    prompts = [parse_chat(vlm_data.messages(data, r), i) for i, r in enumerate(rows)]
    opts = "options: {dtype: float32, enforce_eager: true, gpu_memory_utilization: 0.2, require_no_prefix_cache: true}"
    verdict = True
    llava = vlm.build_random_llava(root / "llava")
    head = (f"name: tiny-vlm-vllm\nversion: '1'\nframework:\n  name: vllm\n  version: '*'\n  {opts}\n"
            "inputs:\n  - {name: messages, type: chat}\noutputs:\n  - {name: text, type: tokens, element_type: uint8}\n"
            "response: {kind: tokens, element_type: uint8, text: true}\ngeneration: {max_new_tokens: 8, min_new_tokens: 2}\n")
    print("tiny LLaVA:")
    verdict &= run(head, llava, prompts)
    from mlharness.tasks.qwen3_vl import random_model

    q = random_model.build_random_model(root / "qwen3vl")
    print("tiny Qwen3-VL:")
    verdict &= run(head.replace("tiny-vlm-vllm", "tiny-qwen3-vl-vllm"), q, prompts)
    print("VERDICT", "ok" if verdict else "FAILED")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
