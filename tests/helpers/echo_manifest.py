"""The echo model the submission tests make slow in one place or another: 64 int64 indices in, the same out, each
answered as the bytes ``label-<index>``; ``predict`` is the manifest's ``predict`` hook source (it names where the
run is slowed), ``mlperf`` the manifest's ``mlperf`` mapping (an official model's counts) when given."""

from __future__ import annotations

import textwrap


def echo_manifest(name: str, predict: str, mlperf: str | None = None) -> str:
    body = textwrap.indent(textwrap.dedent(predict).strip("\n"), "  ")
    return f"""\
name: {name}
framework: {{name: echo}}
inputs: [{{name: x, element_type: int64, shape: [1]}}]
outputs: [{{name: y, element_type: int64, shape: [1]}}]
response: {{element_type: bytes}}
{f"mlperf: {mlperf}" + chr(10) if mlperf else ""}attributes: {{measurements: {{starting_weights_filename: "none: an echo"}}}}
dataset:
  name: indices
  init: |
    def init(count):
        return 64
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.array([index], dtype=np.int64)
predict: |
{body}
postprocess: |
  def postprocess(ctx, outputs):
      return [b"label-%d" % i for i in outputs[0][:, 0]]
"""
