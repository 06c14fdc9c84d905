"""The official SQuAD v1.1 evaluation: normalisation, EM, token F1, several ground truths, the printed line."""

from __future__ import annotations

import json

import pytest

from mlharness.tasks.squad.evaluate import (
    evaluate,
    exact_match_score,
    f1_score,
    normalize_answer,
    result_text,
)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Grand Hotel, Paris!", "grand hotel paris"),
        ("an apple a day", "apple day"),
        ("A", ""),
        ("Theatre of the Absurd", "theatre of absurd"),  # 'the' only as a whole word
        ("  Steve   Smith's\tcar ", "steve smiths car"),  # punctuation removed, not replaced by a space
        ("(1,984) tons.", "1984 tons"),
        ("Café Anna", "café anna"),  # no accent stripping in the official normalisation
        ("the-end", "theend"),  # the hyphen goes first, so 'the' is no longer a word of its own
    ],
)
def test_normalize_answer(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


def test_exact_match_ignores_case_articles_and_punctuation() -> None:
    assert exact_match_score("the Grand Hotel, Paris", "Grand Hotel Paris")
    assert exact_match_score("Paris.", "paris")
    assert not exact_match_score("Grand Hotel", "Grand Hotel Paris")


def test_f1_on_known_pairs() -> None:
    # prediction {cat, sat} vs truth {cat, sat, on, mat}: precision 1, recall 1/2
    assert f1_score("the cat sat", "a cat sat on the mat") == pytest.approx(2 / 3)
    # repeated tokens count as often as they occur in both: {x y y} vs {y y z} share y twice, of 3 and 3
    assert f1_score("x y y", "y y z") == pytest.approx(2 / 3)
    assert f1_score("Paris", "London") == 0
    assert f1_score("the", "a") == 0  # both normalise to nothing: no common token
    assert f1_score("Grand Hotel, Paris", "the grand hotel paris") == 1.0


def _dataset(*qas: tuple[str, list[str]]) -> list[dict]:
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": qid, "question": "q", "answers": [{"answer_start": 0, "text": t} for t in truths]}
        for qid, truths in qas]}]}]


def test_evaluate_takes_the_best_ground_truth_and_scores_missing_answers_zero() -> None:
    data = _dataset(("q1", ["Grand Hotel", "the Grand Hotel, Paris"]),
                    ("q2", ["cat sat on the mat", "dog"]),
                    ("q3", ["anything"]))
    predictions = {"q1": "grand hotel paris", "q2": "the cat sat"}  # q3 unanswered
    result = evaluate(data, predictions)
    assert list(result) == ["exact_match", "f1"]
    assert result["exact_match"] == pytest.approx(100.0 / 3)
    # q1 exact (second truth), q2 best F1 2*(1*0.5)/(1.5) = 2/3 against the first truth, q3 zero
    assert result["f1"] == pytest.approx(100.0 * (1 + 2 / 3) / 3)


def test_evaluate_only_restricts_the_questions() -> None:
    data = _dataset(("q1", ["a b"]), ("q2", ["c"]))
    assert evaluate(data, {"q1": "a b"}, only={"q1"}) == {"exact_match": 100.0, "f1": 100.0}
    assert evaluate(data, {"q1": "a b"}) == {"exact_match": 50.0, "f1": 50.0}
    with pytest.raises(ValueError):
        evaluate(data, {}, only=set())


def test_result_text_is_the_official_line() -> None:
    text = result_text({"exact_match": 81.2, "f1": 88.5})
    assert text == '{"exact_match": 81.2, "f1": 88.5}\n'
    assert json.loads(text) == {"exact_match": 81.2, "f1": 88.5}
