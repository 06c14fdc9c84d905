"""Models of the kinds users plug in, built here with random weights and their manifests, as a user writes them
from docs/manifest.md: a PyTorch classifier with a transformers architecture (TorchScript), a Keras CNN saved
both in the Keras 3 format (``.keras``) and as a SavedModel, and a PyTorch model with embedding tables exported
with ``torch.export`` (``.pt2``)."""

from __future__ import annotations

from pathlib import Path

SEQ = 32  # BERT tokens per sample
VOCAB = 1000
TABLES = (1000, 500, 200)  # rows of each embedding table of the recommendation model
DENSE = 13  # dense features of the recommendation model

BERT_MANIFEST = f"""\
name: tiny_bert_classifier
framework: {{name: pytorch}}
inputs: [{{name: input_ids, element_type: int64, shape: [{SEQ}]}}]
outputs: [{{name: logits, element_type: float32, shape: [3]}}]
model: {{graph_path: bert.pt}}
batching: {{max_batchsize: 8}}
dataset:
  name: random_token_ids
  init: |
    def init(count):
        return 64
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      return np.random.default_rng(index).integers(1, {VOCAB}, size={SEQ}, dtype=np.int64)
postprocess: |
  import numpy as np
  def postprocess(ctx, outputs):
      return np.argmax(outputs[0], axis=1).astype(np.int32)
"""

KERAS_MANIFEST = """\
name: keras_cnn
framework: {{name: tensorflow}}
inputs: [{{name: image, element_type: float32, shape: [32, 32, 3]}}]
outputs: [{{name: output_0, element_type: float32, shape: [10]}}]
model: {{graph_path: {graph}}}
batching: {{max_batchsize: 8}}
dataset:
  name: random_images
  init: |
    def init(count):
        return 64
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      return np.random.default_rng(index).random((32, 32, 3), dtype=np.float32)
postprocess: |
  import numpy as np
  def postprocess(ctx, outputs):
      return np.argmax(outputs[0], axis=1).astype(np.int32)
"""

RECSYS_MANIFEST = f"""\
name: tiny_recommender
framework: {{name: pytorch}}
inputs:
  - {{name: dense, element_type: float32, shape: [{DENSE}]}}
  - {{name: sparse, element_type: int64, shape: [{len(TABLES)}]}}
outputs: [{{name: click, element_type: float32, shape: [1]}}]
model: {{graph_path: recommender.pt2}}
batching: {{max_batchsize: 32}}
dataset:
  name: random_clicks
  init: |
    def init(count):
        return 256
preprocess: |
  import numpy as np
  def preprocess(ctx, index):
      rng = np.random.default_rng(index)
      dense = rng.random({DENSE}, dtype=np.float32)
      sparse = np.array([rng.integers(0, n) for n in {list(TABLES)}], dtype=np.int64)
      return dense, sparse
"""


def write_bert(folder: Path) -> Path:
    """A 2-layer random BertForSequenceClassification (hidden 64, 3 labels) traced to TorchScript."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=3, torchscript=True)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, torch.ones(2, SEQ, dtype=torch.int64), strict=False)
    traced.save(str(folder / "bert.pt"))
    path = folder / "bert.yaml"
    path.write_text(BERT_MANIFEST)
    return path


def _keras_cnn():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((32, 32, 3), name="image"),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10, name="scores"),
    ])


def write_keras(folder: Path, kind: str) -> Path:
    """The same small CNN as ``.keras`` (kind "keras") or as an exported SavedModel folder (kind "savedmodel")."""
    model = _keras_cnn()
    if kind == "keras":
        graph = "cnn.keras"
        model.save(str(folder / graph))
    else:
        graph = "cnn_savedmodel"
        model.export(str(folder / graph), verbose=False)
    path = folder / f"cnn_{kind}.yaml"
    path.write_text(KERAS_MANIFEST.format(graph=graph))
    return path


def write_recommender(folder: Path) -> Path:
    """Embedding tables summed with a dense MLP's features, then a small MLP: a DLRM-like model, exported with a
    dynamic batch axis."""
    import torch

    class Recommender(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tables = torch.nn.ModuleList(torch.nn.Embedding(n, 16) for n in TABLES)
            self.bottom = torch.nn.Sequential(torch.nn.Linear(DENSE, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
            self.top = torch.nn.Sequential(torch.nn.Linear(16 * (len(TABLES) + 1), 32), torch.nn.ReLU(),
                                           torch.nn.Linear(32, 1))

        def forward(self, dense, sparse):
            parts = [self.bottom(dense)] + [t(sparse[:, i]) for i, t in enumerate(self.tables)]
            return torch.sigmoid(self.top(torch.cat(parts, dim=1)))

    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=1, max=4096)
    example = (torch.rand(2, DENSE), torch.zeros(2, len(TABLES), dtype=torch.int64))
    program = torch.export.export(Recommender().eval(), example, dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(program, str(folder / "recommender.pt2"))
    path = folder / "recommender.yaml"
    path.write_text(RECSYS_MANIFEST)
    return path
