"""SQuAD features and post-processing on hand-built examples whose spans, offsets and flags are worked out by
hand; the feature cache; the synthetic set and its oracle (scored without LoadGen)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError
from mlharness.tasks.squad import dataset as squad
from mlharness.tasks.squad import metric as squad_metric
from mlharness.tasks.squad import models as squad_models
from mlharness.tasks.squad import postprocess as squad_post
from mlharness.tasks.squad import synth as squad_synth
from mlharness.tasks.squad.dataset import SquadExample, check_is_max_context, convert_examples_to_features

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "is", "x", "?", ".", "a", "b", "c", "d", "e",
         "f", "g", "h", "##s", "long"]
ID = {token: i for i, token in enumerate(VOCAB)}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(f"{t}\n" for t in VOCAB))
    return squad.load_tokenizer(path)


def _convert(tokenizer, *examples: SquadExample) -> squad.Features:
    # 12 positions: [CLS] + 4 query tokens + [SEP] leaves 12 - 4 - 3 = 5 context tokens per span, stride 3
    return convert_examples_to_features(list(examples), tokenizer, max_seq_length=12, doc_stride=3,
                                        max_query_length=4)


def test_doc_spans_offsets_and_max_context(tokenizer) -> None:
    f = _convert(tokenizer, SquadExample("q", "what is x?", "a b c d e f g h".split()))
    # 8 context tokens in spans of 5 with stride 3: [0..4] and [3..7]
    assert len(f) == 2
    assert f.doc_span_index.tolist() == [0, 1]
    assert f.unique_id.tolist() == [1000000000, 1000000001]
    head = [ID["[CLS]"], ID["what"], ID["is"], ID["x"], ID["?"], ID["[SEP]"]]
    assert f.input_ids[0].tolist() == head + [ID[t] for t in "abcde"] + [ID["[SEP]"]]
    assert f.input_ids[1].tolist() == head + [ID[t] for t in "defgh"] + [ID["[SEP]"]]
    assert f.segment_ids.tolist() == [[0] * 6 + [1] * 6] * 2
    assert f.input_mask.tolist() == [[1] * 12] * 2
    assert f.n_tokens.tolist() == [12, 12]
    # context tokens start at position 1 + 4 + 1 = 6
    assert f.orig_index[0].tolist() == [-1] * 6 + [0, 1, 2, 3, 4] + [-1]
    assert f.orig_index[1].tolist() == [-1] * 6 + [3, 4, 5, 6, 7] + [-1]
    # token 3 (d): span 0 min(3, 1) + 0.05 beats span 1 min(0, 4) + 0.05; token 4 (e): span 1 min(1, 3) wins
    assert f.max_context[0].tolist() == [False] * 6 + [True, True, True, True, False] + [False]
    assert f.max_context[1].tolist() == [False] * 6 + [False, True, True, True, True] + [False]


def test_check_is_max_context_prefers_the_first_of_equal_spans() -> None:
    spans = [(0, 5), (2, 5)]  # token 3: span 0 min(3, 1) = 1, span 1 min(1, 3) = 1, same length: span 0
    assert check_is_max_context(spans, 0, 3)
    assert not check_is_max_context(spans, 1, 3)
    assert check_is_max_context(spans, 1, 6)  # only span 1 holds it


def test_wordpieces_padding_unknown_words_and_query_truncation(tokenizer) -> None:
    f = _convert(tokenizer, SquadExample("q", "what is x long long ?", ["bs", "Zz.", "c"]))
    # query cut to 4 tokens; "bs" -> b ##s, "Zz." -> [UNK] . ; 5 context tokens fit in one span
    assert len(f) == 1
    ids = [ID[t] for t in ("[CLS]", "what", "is", "x", "long", "[SEP]", "b", "##s", "[UNK]", ".", "c", "[SEP]")]
    assert f.input_ids[0].tolist() == ids
    assert f.orig_index[0, 6:11].tolist() == [0, 0, 1, 1, 2]  # tok_to_orig_index: word of each piece
    short = _convert(tokenizer, SquadExample("q2", "x", ["a"]))
    # [CLS] x [SEP] a [SEP] then zero padding in ids, mask and segments
    assert short.input_ids[0].tolist() == [ID["[CLS]"], ID["x"], ID["[SEP]"], ID["a"], ID["[SEP]"]] + [0] * 7
    assert short.input_mask[0].tolist() == [1] * 5 + [0] * 7
    assert short.segment_ids[0].tolist() == [0, 0, 0, 1, 1] + [0] * 7
    assert short.n_tokens.tolist() == [5]


def _logits(points: dict[tuple[int, int], float]) -> np.ndarray:
    """float64 [384, 2] at -10 except the given (position, column) values."""
    out = np.full((384, 2), -10.0)
    for (pos, col), value in points.items():
        out[pos, col] = value
    return out


def test_answer_in_the_second_span_and_the_max_context_rule(tokenizer) -> None:
    example = SquadExample("q", "what is x?", "a b c d e f g h".split())
    f = _convert(tokenizer, example)
    # feature 0 scores 'e' (position 10) highest, but 'e' has its max context in span 1: the pair is invalid;
    # feature 1 points at 'g h' (positions 9..10)
    results = {0: _logits({(10, 0): 10.0, (10, 1): 10.0}), 1: _logits({(9, 0): 8.0, (10, 1): 7.0})}
    assert squad_post.predict_answers([example], f, VOCAB, results) == {"q": "g h"}
    # the same start in feature 1 (position 7 = 'e', max context there) is accepted
    results[1] = _logits({(7, 0): 9.0, (7, 1): 9.0, (9, 0): 8.0, (10, 1): 7.0})
    assert squad_post.predict_answers([example], f, VOCAB, results) == {"q": "e"}
    # the 20 best starts and ends all in the padding (>= 12 tokens): no valid span at all
    padding = {(p, c): 5.0 for p in range(12, 32) for c in (0, 1)}
    assert squad_post.predict_answers([example], f, VOCAB, {0: _logits(padding), 1: _logits(padding)}) == {
        "q": "empty"}
    # the only context start (9) comes after the only context end (7): rejected too
    backwards = dict(padding) | {(9, 0): 9.0, (31, 0): -10.0, (7, 1): 9.0, (31, 1): -10.0}
    assert squad_post.predict_answers([example], f, VOCAB, {1: _logits(backwards)}) == {"q": "empty"}
    assert squad_post.predict_answers([example], f, VOCAB, results, max_answer_length=0) == {"q": "empty"}


def test_predicted_text_is_projected_onto_the_original_words(tokenizer) -> None:
    example = SquadExample("q", "what", ["(Bs.", "c"])
    f = _convert(tokenizer, example)  # '(' is not in the vocabulary: "(Bs." -> [UNK] b ##s .
    pieces = [VOCAB[i] for i in f.input_ids[0, 3:f.n_tokens[0] - 1]]
    assert pieces == ["[UNK]", "b", "##s", ".", "c"]
    # 'b ##s' -> "bs" is found in the basic tokens of "(Bs." and cut out of it with the original case
    assert squad_post.predict_answers([example], f, VOCAB, {0: _logits({(4, 0): 5, (5, 1): 5})}) == {"q": "Bs"}


@pytest.mark.parametrize(
    ("pred", "orig", "final"),
    [
        ("steve smith", "Steve Smith's", "Steve Smith"),
        ("cafe anna", "Café Anna", "Café Anna"),  # accents stripped in the match, kept in the answer
        ("1984", "(1984-1990)", "1984"),
        ("nothing", "Steve Smith", "Steve Smith"),  # not found: the whole original span
        ("[unk] x", "\u00e9\u0301 x", "\u00e9\u0301 x"),
    ],
)
def test_get_final_text(pred: str, orig: str, final: str) -> None:
    assert squad_post.get_final_text(pred, orig) == final


def _write_log(path: Path, responses: dict[int, np.ndarray], dtype: type = np.float32) -> None:
    entries = [{"seq_id": i, "qsl_idx": q, "data": np.asarray(r, dtype).tobytes().hex()}
               for i, (q, r) in enumerate(responses.items())]
    path.write_text(json.dumps(entries))


def test_decode_accuracy_log_pads_transposes_and_keeps_the_last_duplicate(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    short = np.arange(8, dtype=np.float32).reshape(4, 2)
    entries = [{"seq_id": 0, "qsl_idx": 1, "data": np.zeros((384, 2), np.float32).tobytes().hex()},
               {"seq_id": 1, "qsl_idx": 1, "data": short.tobytes().hex()}]
    log.write_text(json.dumps(entries))
    results, n = squad_post.decode_accuracy_log(log, n_features=2)
    assert n == 2 and list(results) == [1]
    assert results[1][:4].tolist() == short.tolist() and (results[1][4:] == -10000.0).all()
    results, _ = squad_post.decode_accuracy_log(log, n_features=2, transposed=True)
    assert results[1][:4].tolist() == short.reshape(2, 4).T.tolist()
    _write_log(log, {5: short})
    with pytest.raises(AccuracyError, match="qsl_idx 5"):
        squad_post.decode_accuracy_log(log, n_features=2)
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 0, "data": "00" * 6}]))
    with pytest.raises(AccuracyError, match="not \\(start, end\\) pairs"):
        squad_post.decode_accuracy_log(log, n_features=2)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return squad_synth.write_synthetic_squad(tmp_path_factory.mktemp("squad"), count=24)


def test_feature_cache_is_keyed_by_files_and_parameters(synthetic: Path, tmp_path: Path, monkeypatch) -> None:
    val, vocab = synthetic / "dev-v1.1.json", synthetic / "vocab.txt"
    first = squad.load_features(val, vocab, cache=tmp_path)
    cached = list((tmp_path / "squad_features").glob("*.npz"))
    assert len(cached) == 1 and cached[0].stem == squad.features_cache_key(val, vocab)

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cached features should have been used")

    monkeypatch.setattr(squad, "convert_examples_to_features", no_conversion)
    again = squad.load_features(val, vocab, cache=tmp_path)
    assert np.array_equal(again.input_ids, first.input_ids) and np.array_equal(again.max_context, first.max_context)
    changed = tmp_path / "vocab.txt"
    changed.write_text(vocab.read_text() + "extra\n")
    assert squad.features_cache_key(val, changed) != squad.features_cache_key(val, vocab)
    assert squad.features_cache_key(val, vocab, doc_stride=64) != squad.features_cache_key(val, vocab)
    assert squad.features_cache_key(val, vocab, tokenizer="fast") != squad.features_cache_key(val, vocab)


def test_synthetic_set_needs_several_spans_and_the_oracle_answers_everything(synthetic: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    words = (squad_synth.NOUNS + squad_synth.ADJECTIVES + squad_synth.VOWEL_ADJECTIVES + squad_synth.VERBS
             + squad_synth.FUNCTION + squad_synth.NAMES + squad_synth.UNITS)
    assert not set(squad_synth.KEYS) & set(words)  # a key word anywhere else would confuse the oracle
    assert squad_synth.synthetic_squad(24) == json.loads((synthetic / "dev-v1.1.json").read_text())  # deterministic
    examples, data = squad.read_squad_examples(synthetic / "dev-v1.1.json")
    assert len(examples) == 24
    features = squad.convert_examples_to_features(examples, squad.load_tokenizer(synthetic / "vocab.txt"))
    assert features.doc_span_index.max() >= 3  # contexts of several doc spans
    fast = squad.convert_examples_to_features(examples, squad.load_tokenizer(synthetic / "vocab.txt", "fast"))
    assert np.array_equal(fast.input_ids, features.input_ids)

    session = ort.InferenceSession(str(squad_models.ensure_oracle_model(tmp_path / "oracle.onnx")))
    start, end = session.run(None, dict(zip(squad_models.INPUT_NAMES, (
        features.input_ids.astype(np.int64), features.input_mask.astype(np.int64),
        features.segment_ids.astype(np.int64)), strict=True)))
    # answers are found in later spans too: the max-context start of some answers lies in span >= 1
    hits = [f for f in range(len(features)) if ((start[f] > 0) & features.max_context[f]).any()]
    assert {int(features.doc_span_index[f]) for f in hits} - {0}
    # scoring through a LoadGen-format log: all features, then only the first 40 (complete questions only)
    log = tmp_path / "mlperf_log_accuracy.json"
    _write_log(log, {f: np.stack([start[f], end[f]], axis=-1) for f in range(len(features))})
    result = squad_metric.score_accuracy_log(log, synthetic / "dev-v1.1.json", synthetic / "vocab.txt",
                                      tmp_path / "predictions.json")
    assert result.text == '{"exact_match": 100.0, "f1": 100.0}\n'
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    truths = {qa["id"]: qa["answers"][0]["text"] for a in data for p in a["paragraphs"] for qa in p["qas"]}
    assert predictions == truths
    _write_log(log, {f: np.stack([start[f], end[f]], axis=-1) for f in range(40)})
    partial = squad_metric.score_accuracy_log(log, synthetic / "dev-v1.1.json", synthetic / "vocab.txt")
    complete = int((np.bincount(features.example_index)[:].cumsum() <= 40).sum())
    touched = len(set(features.example_index[:40].tolist()))  # questions with at least one logged feature
    # every question is scored (the official line); the fully logged ones are also given as a labelled subset
    official, subset = partial.text.splitlines()
    assert json.loads(official)["f1"] == partial.value
    assert 100.0 * complete / 24 <= partial.value <= 100.0 * touched / 24
    assert subset.startswith(f"subset of {complete} of 24 questions, not comparable: exact_match 100.000, f1 100.000")
    assert partial.details["subset"] == {"questions": complete, "exact_match": 100.0, "f1": 100.0}
