"""Synthetic SQuAD v1.1 and BERT-shaped test models, so the whole BERT pipeline runs with no download.

The dataset is a real-format ``dev-v1.1.json`` plus a WordPiece ``vocab.txt``.  Every question starts with a
*key* word (one of the NATO alphabet) and its answer sits in the context between two copies of that key:
``... alpha the Grand Hotel, Paris alpha ...``.  Contexts run to several doc spans, answers are placed in later
spans too, and answers carry articles, punctuation, possessives, accents, numbers, sub-word pieces and unknown
words, so feature conversion, max-context selection, get_final_text and the official normalisation are all
exercised.

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
import random
import string
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks._files import atomic_write, atomic_write_bytes

log = logging.getLogger(__name__)

DEFAULT_COUNT = 48
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KEYS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
        "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
        "whiskey", "xray", "yankee", "zulu"]
NOUNS = ["city", "river", "inn", "station", "tower", "bridge", "museum", "market", "garden", "harbor", "castle",
         "school", "church", "street", "road", "village", "valley", "island", "forest", "mountain", "lake",
         "report", "council", "king", "queen", "army", "train", "ship", "wall", "gate", "house", "farm", "mill"]
ADJECTIVES = ["old", "new", "grand", "great", "small", "northern", "southern", "royal", "ancient", "modern",
              "famous", "quiet", "busy"]
VOWEL_ADJECTIVES = ["old", "ancient", "early", "eastern", "open"]
VERBS = ["open", "visit", "record", "list", "mention", "name", "restore", "own", "cross", "paint"]
FUNCTION = ["the", "a", "an", "of", "and", "in", "to", "was", "is", "by", "for", "on", "at", "with", "from",
            "near", "after", "before", "during", "which", "what", "where", "who", "did", "it", "its", "their"]
NAMES = ["mary", "john", "anna", "peter", "paris", "london", "berlin", "rome", "vienna", "oslo", "cafe"]
UNITS = ["tons", "miles", "people", "years"]
SUFFIXES = ["##s", "##ed", "##ing", "##ly", "##er"]
UNKNOWN = ["Zyxqor", "Qwvurt", "Xqzzyn"]  # never in the vocabulary: tokenised to [UNK]
LONG_QUESTION_EVERY = 7  # every 7th question runs past the 64-token query limit


def build_vocab() -> list[str]:
    words = SPECIALS + list(string.punctuation) + list(string.digits) + [f"##{d}" for d in string.digits]
    words += KEYS + NOUNS + ADJECTIVES + VOWEL_ADJECTIVES + VERBS + FUNCTION + NAMES + UNITS + SUFFIXES
    return list(dict.fromkeys(words))  # unique, first occurrence keeps its place


def _filler_word(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(FUNCTION)
    if kind < 0.55:
        return rng.choice(NOUNS) + rng.choice(["", "", "s"])  # "towers" -> tower ##s
    if kind < 0.7:
        return rng.choice(VERBS) + rng.choice(["", "ed", "ing"])
    if kind < 0.85:
        return rng.choice(ADJECTIVES)
    if kind < 0.97:
        return rng.choice(NAMES).capitalize()
    return str(rng.randint(2, 2999))


def _answer(rng: random.Random) -> tuple[str, list[str]]:
    """(answer text as it appears in the context, further ground truths that are substrings of it)."""
    noun, noun2, adj = rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(ADJECTIVES)
    name = rng.choice(NAMES).capitalize()
    kind = rng.randrange(8)
    if kind == 0:
        core = f"{adj.capitalize()} {noun.capitalize()}"
        return f"the {core}, {name}", [core, f"{core}, {name}"]
    if kind == 1:
        return f"an {rng.choice(VOWEL_ADJECTIVES)} {noun}", [noun]
    if kind == 2:
        number = f"{rng.randint(1, 99)},{rng.randint(100, 999)}"
        return f"{number} {rng.choice(UNITS)}", [number]
    if kind == 3:
        return f"{name}'s {noun}s", [f"{name}'s {noun}s"]
    if kind == 4:
        return f"({noun.capitalize()}) {noun2}", [noun2]
    if kind == 5:
        return f"Café {name}", [f"Café {name}"]
    if kind == 6:
        return f"a {rng.choice(UNKNOWN)} {noun}", [noun]
    return f"{name}.", [name]  # a trailing full stop that normalisation drops


def _question(rng: random.Random, key: str, number: int) -> str:
    if number % LONG_QUESTION_EVERY == LONG_QUESTION_EVERY - 1:
        return f"{key}: " + " ".join(_filler_word(rng) for _ in range(70)) + "?"
    return f"{key}: which {rng.choice(NOUNS)} did the {rng.choice(NOUNS)} {rng.choice(VERBS)}?"


def synthetic_squad(count: int = DEFAULT_COUNT, seed: int = 0) -> dict[str, Any]:
    """A SQuAD v1.1 dev json with ``count`` questions, deterministic for a given seed."""
    if count < 1:
        raise DatasetError(f"synthetic SQuAD: count must be >= 1, got {count}")
    rng = random.Random(seed)
    articles: list[dict[str, Any]] = []
    done = 0
    while done < count:
        n_questions = min(rng.randint(1, 4), count - done)
        keys = rng.sample(KEYS, n_questions)
        n_words = rng.randint(450, 800)  # several 384-token features per question once split into WordPieces
        words = [_filler_word(rng) for _ in range(n_words)]
        # one answer in the last third (a later doc span), the others anywhere; inserted back to front
        slots = sorted([rng.randint(2 * n_words // 3, n_words - 1)]
                       + [rng.randint(1, n_words - 1) for _ in range(n_questions - 1)])
        # sorted by (slot, key): at a shared slot the later insertion lands first, so the context lists the
        # answers in exactly this order
        items = sorted(zip(slots, keys, [_answer(rng) for _ in range(n_questions)], strict=True))
        for slot, key, (text, _) in reversed(items):
            words[slot:slot] = [key, text, key]
        context = " ".join(words)
        qas = []
        cursor = 0
        for _, key, (text, variants) in items:
            start = context.index(f"{key} {text} {key}", cursor) + len(key) + 1
            cursor = start
            truths = [{"answer_start": start, "text": text}]
            truths += [{"answer_start": start + text.index(v), "text": v} for v in variants]
            qas.append({"answers": truths, "question": _question(rng, key, done + len(qas)),
                        "id": f"{seed:04x}{done + len(qas):020x}"})
        done += len(qas)
        if not articles or len(articles[-1]["paragraphs"]) == 3:
            articles.append({"title": f"Synthetic_{len(articles)}", "paragraphs": []})
        articles[-1]["paragraphs"].append({"context": context, "qas": qas})
    return {"data": articles, "version": "1.1"}


def write_synthetic_squad(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write ``dev-v1.1.json`` and ``vocab.txt`` into ``out`` (the layout the squad dataset manifest reads)."""
    out = Path(out)
    files = {"vocab.txt": "".join(f"{w}\n" for w in build_vocab()).encode("utf-8"),
             "dev-v1.1.json": json.dumps(synthetic_squad(count, seed)).encode("utf-8")}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():  # the vocabulary first: the data file is what makes the set complete
            if not (out / name).is_file() or (out / name).read_bytes() != data:
                atomic_write_bytes(out / name, data)
    except OSError as e:
        raise DatasetError(f"synthetic SQuAD: cannot write {out}: {e}") from e
    return out


def ensure_synthetic_squad(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, (re)written only when its files differ from what ``count``/``seed`` give."""
    return write_synthetic_squad(out, count, seed)


# ---- models ---------------------------------------------------------------------------------------------------

ORACLE_OPSET = 17
ORACLE_IR_VERSION = 8
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
OUTPUT_NAMES = ("output_start_logits", "output_end_logits")  # the MLPerf ONNX model's outputs
SEQ_LEN = 384


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
                              doc_string="mlharness SQuAD oracle: answers lie between two copies of the question's key")
    model.ir_version = ORACLE_IR_VERSION
    onnx.checker.check_model(model)
    return model


def _reusable(path: Path, doc_string: str | None = None) -> bool:
    """A model already at ``path`` that loads, checks, has the real input names (and the given doc string)."""
    import onnx

    if not path.is_file():
        return False
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - any load/check failure means: rebuild it
        log.warning("rebuilding %s: %s", path, e)
        return False
    return [i.name for i in model.graph.input] == list(INPUT_NAMES) and (
        doc_string is None or model.doc_string == doc_string)


def ensure_oracle_model(path: Path | str) -> Path:
    """Write the oracle ONNX model to ``path`` unless a valid one is there; returns the path."""
    path = Path(path)
    model = _build_oracle()
    if _reusable(path, model.doc_string):
        return path
    atomic_write_bytes(path, model.SerializeToString())
    log.info("wrote the SQuAD oracle model to %s", path)
    return path


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
    return path
