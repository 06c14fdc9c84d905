"""BERT-shaped test models for the synthetic SQuAD set (:mod:`.synth`): the ``model.generator`` functions.

The **oracle** ONNX model has the real model's inputs and outputs and reads the answer off the token ids: the
start logit is high where the previous token equals the question's first token (the key) and the end logit where
the next one does, inside the context segment.  The reference post-processing then recovers every answer, so a
correct pipeline scores exactly EM = F1 = 100 and any slip (wrong segment ids, shifted offsets, start and end
swapped, wrong max-context flags) shows up as a lower score.  The **random** model is a real
``BertForQuestionAnswering`` architecture, small and randomly initialised, exported with torch.onnx: it has the
real model's graph structure and costs, for performance runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks.files import atomic_write, atomic_write_bytes, mark_generated, reuse_generated

log = logging.getLogger(__name__)


ORACLE_OPSET = 17
ORACLE_IR_VERSION = 8
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
OUTPUT_NAMES = ("output_start_logits", "output_end_logits")  # the MLPerf ONNX model's outputs
SEQ_LEN = 384


ORACLE_DOC = "mlharness SQuAD oracle: answers lie between two copies of the question's key"


def _build_oracle():  # -> onnx.ModelProto
    """start[i] = 10 if ids[i-1] == ids[1] (the question's key) inside the context, else -10; end[i] likewise
    with ids[i+1]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: Any, dtype: Any) -> Any:
        return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)

    init = [const("zero", 0, np.int64), const("one", 1, np.int64), const("hi", 10.0, np.float32),
            const("lo", -10.0, np.float32), const("ax1", [1], np.int64), const("s0", [0], np.int64),
            const("s1", [1], np.int64), const("s2", [2], np.int64), const("e_last", [-1], np.int64),
            const("e_max", [np.iinfo(np.int64).max], np.int64)]
    n = helper.make_node
    nodes = [
        n("Slice", ["input_ids", "s1", "s2", "ax1"], ["key"]),  # [B, 1]: the first question token
        n("Mul", ["key", "zero"], ["zcol"]),
        n("Concat", ["zcol", "input_ids"], ["left_padded"], axis=1),
        n("Slice", ["left_padded", "s0", "e_last", "ax1"], ["prev"]),  # prev[i] = ids[i-1]
        n("Concat", ["input_ids", "zcol"], ["right_padded"], axis=1),
        n("Slice", ["right_padded", "s1", "e_max", "ax1"], ["next"]),  # next[i] = ids[i+1]
        n("Equal", ["segment_ids", "one"], ["in_segment"]),
        n("Equal", ["input_mask", "one"], ["in_mask"]),
        n("And", ["in_segment", "in_mask"], ["in_context"]),
        n("Equal", ["prev", "key"], ["after_key"]),
        n("Equal", ["next", "key"], ["before_key"]),
        n("And", ["after_key", "in_context"], ["is_start"]),
        n("And", ["before_key", "in_context"], ["is_end"]),
        n("Where", ["is_start", "hi", "lo"], [OUTPUT_NAMES[0]]),
        n("Where", ["is_end", "hi", "lo"], [OUTPUT_NAMES[1]]),
    ]
    graph = helper.make_graph(
        nodes, "mlharness_squad_oracle",
        inputs=[helper.make_tensor_value_info(name, TensorProto.INT64, ["batch_size", SEQ_LEN]) for name in INPUT_NAMES],
        outputs=[helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch_size", SEQ_LEN]) for name in OUTPUT_NAMES],
        initializer=init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ORACLE_OPSET)], producer_name="mlharness",
                              doc_string=ORACLE_DOC)
    model.ir_version = ORACLE_IR_VERSION
    onnx.checker.check_model(model)
    return model


def _reusable(path: Path, doc_string: str) -> bool:
    """A model already at ``path``: stamped as written for ``doc_string``, or one that loads, checks, has the real
    input names and that doc string (then stamped)."""
    if reuse_generated(path, doc_string):
        return True
    import onnx

    if not path.is_file():
        return False
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - any load/check failure means: rebuild it
        log.warning("rebuilding %s: %s", path, e)
        return False
    if [i.name for i in model.graph.input] == list(INPUT_NAMES) and model.doc_string == doc_string:
        mark_generated(path, doc_string)
        return True
    return False


def ensure_oracle_model(path: Path | str) -> Path:
    """Write the oracle ONNX model to ``path`` unless a valid one is there; returns the path."""
    path = Path(path)
    if _reusable(path, ORACLE_DOC):
        return path
    atomic_write_bytes(path, _build_oracle().SerializeToString())
    log.info("wrote the SQuAD oracle model to %s", path)
    return mark_generated(path, ORACLE_DOC)


RANDOM_CONFIG = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 64, "max_position_embeddings": 512, "type_vocab_size": 2}
RANDOM_DOC = "mlharness random BertForQuestionAnswering " + json.dumps(RANDOM_CONFIG, sort_keys=True)


def _example_batch(batch: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs shaped like real features: [CLS] query [SEP] context [SEP] then padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, RANDOM_CONFIG["vocab_size"], size=(batch, SEQ_LEN), dtype=np.int64)
    mask = np.zeros_like(ids)
    seg = np.zeros_like(ids)
    for b in range(batch):
        used, query = int(rng.integers(40, SEQ_LEN)), int(rng.integers(5, 30))
        mask[b, :used] = 1
        seg[b, query:used] = 1
        ids[b, used:] = 0
    return ids, mask, seg


def _random_bert():  # -> torch.nn.Module
    """The random BERT QA model (seeded: every call builds the same weights) with positional MLPerf inputs and a
    (start, end) tuple out; the ONNX and TorchScript forms are both made from it."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(0)
    config = BertConfig(**RANDOM_CONFIG, attn_implementation="eager")
    bert = BertForQuestionAnswering(config).eval()

    class Wrapper(torch.nn.Module):
        """Positional inputs in the MLPerf order, a (start, end) tuple out."""

        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids, input_mask, segment_ids):  # noqa: ANN001, ANN201
            out = self.model(input_ids=input_ids, attention_mask=input_mask, token_type_ids=segment_ids,
                             return_dict=True)
            return out.start_logits, out.end_logits

    return Wrapper(bert).eval()


def ensure_random_bert_torchscript(path: Path | str) -> Path:
    """The random BERT as TorchScript (the PyTorch variant of bert-random; same weights as the ONNX file)."""
    import torch

    path = Path(path)
    if path.is_file():
        return path
    wrapper = _random_bert()
    sample = tuple(torch.from_numpy(x) for x in _example_batch(2, seed=1))

    def write(tmp: str) -> None:
        with torch.no_grad():
            torch.jit.trace(wrapper, sample, check_trace=False).save(tmp)

    return atomic_write(path, write, suffix=".pt")


def ensure_random_bert_model(path: Path | str) -> Path:
    """A small randomly initialised BertForQuestionAnswering exported to ONNX with the MLPerf model's input and
    output names and a dynamic batch axis; checked against PyTorch before it is kept."""
    path = Path(path)
    if _reusable(path, RANDOM_DOC):
        return path
    import warnings

    import onnx
    import onnxruntime as ort
    import torch

    wrapper = _random_bert()
    # Traced on a padded batch: an all-ones mask would let the tracer fold the attention mask away.
    sample = tuple(torch.from_numpy(x) for x in _example_batch(2, seed=1))

    def write(tmp: str) -> None:  # exported, then checked against PyTorch before it is renamed into place
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, sample, tmp, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                              opset_version=ORACLE_OPSET, dynamo=False,
                              dynamic_axes={name: {0: "batch_size"} for name in INPUT_NAMES + OUTPUT_NAMES})
        model = onnx.load(tmp)
        model.doc_string = RANDOM_DOC
        onnx.save(model, tmp)
        check = _example_batch(3, seed=2)
        got = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"]).run(
            None, dict(zip(INPUT_NAMES, check, strict=True)))
        with torch.no_grad():
            want = wrapper(*(torch.from_numpy(x) for x in check))
        for g, w in zip(got, want, strict=True):
            if not np.allclose(g, w.numpy(), atol=1e-4):
                raise DatasetError(f"random BERT export: onnxruntime and PyTorch disagree by "
                                   f"{float(np.abs(g - w.numpy()).max())}")

    atomic_write(path, write, suffix=".onnx")
    log.info("wrote the random BERT QA model to %s", path)
    return mark_generated(path, RANDOM_DOC)
