"""``toy-stage``: a built-in stage for tests, benchmarks and a user's first pipeline (the ``pipeline-toy`` manifest).

It adds its name to the item's ``trail`` (the stages the sample went through, in order) and costs ``delay_ms`` per
call: a sleep, which releases the GIL as a library computing off the interpreter would, or with ``cpu: true`` a
busy loop that holds the interpreter (a stage in pure Python). ``fail_sample`` (a sample's ``index``, as the
``preprocess`` hook put it in the item) raises for that sample; ``hang_sample`` sleeps past any deadline for it.
``route_to`` with ``route_times`` sends each item back to an earlier stage that many times (a retrieval loop).
``count_calls`` numbers the stage's calls since its ``begin_test`` into ``item["calls"][name]`` (state kept across
samples, reset before LoadGen's test as e2e-rag-db's database build is).
"""

from __future__ import annotations

import time
from typing import Any

from mlharness.kinds.pipeline.stage import Item, StageContext, StageError, StageSpec, register_stage

HANG_S = 3600.0


class ToyStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.name = spec.name
        opts = spec.options
        self.delay_s = float(opts.get("delay_ms", 0.0)) / 1000.0
        self.cpu = bool(opts.get("cpu", False))
        self.fail_sample = opts.get("fail_sample")
        self.hang_sample = opts.get("hang_sample")
        self.route_to = opts.get("route_to")
        self.route_times = int(opts.get("route_times", 1 if self.route_to else 0))
        self.load_ms = float(opts.get("load_ms", 0.0))
        self.count_calls = bool(opts.get("count_calls", False))
        self.calls = 0

    def load(self) -> None:
        if self.load_ms:
            time.sleep(self.load_ms / 1000.0)

    def run(self, item: Item) -> Item:
        index = item.get("index")
        if self.fail_sample is not None and index == self.fail_sample:
            raise StageError(self.name, f"toy failure on sample {index} (options.fail_sample)")
        if self.hang_sample is not None and index == self.hang_sample:
            time.sleep(HANG_S)
        if self.cpu:
            end = time.perf_counter() + self.delay_s
            while time.perf_counter() < end:
                pass
        elif self.delay_s:
            time.sleep(self.delay_s)
        item.setdefault("trail", []).append(self.name)
        if self.count_calls:
            self.calls += 1
            item.setdefault("calls", {})[self.name] = self.calls
        if self.route_to is not None:
            sent = item.setdefault("routed", {})
            if sent.get(self.name, 0) < self.route_times:
                sent[self.name] = sent.get(self.name, 0) + 1
                item["route"] = self.route_to
        return item

    def begin_test(self) -> None:
        self.calls = 0

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"delay_ms": self.delay_s * 1000.0, "cpu": self.cpu}


@register_stage("toy-stage")
def toy_stage(spec: StageSpec, ctx: StageContext) -> ToyStage:
    return ToyStage(spec, ctx)
