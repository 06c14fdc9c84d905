"""Synthetic news text: articles and their highlights, generated from fixed word lists (no download).

The sentences carry what the evaluation's sentence split must get right: abbreviations with periods ("Mr.",
"Dr.", "U.S."), decimal numbers, quotations and question marks; summaries reuse phrases of their article so a
model that copies scores part of the ROUGE, as on the real set.
"""

from __future__ import annotations

import numpy as np

NAMES = ("Smith", "Jones", "Taylor", "Brown", "Wilson", "Evans", "Thomas", "Roberts", "Walker", "Wright",
         "Hughes", "Green", "Hall", "Clarke", "Jackson", "Turner", "Harris", "Martin", "Cooper", "Ward")
TITLES = ("Mr.", "Mrs.", "Dr.", "Prof.", "Sen.", "Gov.")
PLACES = ("London", "Paris", "Chicago", "Boston", "Sydney", "Madrid", "the U.S.", "Texas", "the city centre",
          "the coast", "the capital", "a small village", "the stadium", "the harbour", "the old town")
SUBJECTS = ("the council", "the police", "the company", "the team", "officials", "residents", "the hospital",
            "the school", "scientists", "the government", "investors", "the club", "rescuers", "the court",
            "local farmers", "the airline", "the museum", "doctors", "engineers", "the union")
VERBS = ("announced", "rejected", "approved", "reported", "delayed", "completed", "launched", "opened",
         "closed", "defended", "criticised", "welcomed", "investigated", "confirmed", "denied", "unveiled")
OBJECTS = ("a new plan", "the proposal", "the budget", "a rescue mission", "the final report", "a long inquiry",
           "the new stadium", "a record profit", "the ban", "a peace deal", "the bridge repairs",
           "an emergency appeal", "the exhibition", "a major recall", "the contract", "the election result")
WHEN = ("on Monday", "on Tuesday", "last week", "this morning", "after midnight", "in March", "late on Friday",
        "earlier this year", "at the weekend", "on Sunday evening")
REASONS = ("after heavy rain", "despite strong protests", "following a long review", "amid rising costs",
           "because of safety concerns", "after a public vote", "to cut waiting times", "for the first time")
EXTRA = ("The decision affects about {n} million people.", "Costs rose by {p} per cent in a single year.",
         "\"We are very pleased with the result,\" {t} {name} said.", "Is this the end of the story?",
         "{t} {name} said the work would take {k} more months.", "Almost {k},000 people attended the event.",
         "Prices were up {p} per cent, the report said.", "Nobody was hurt, according to {subject}.")


def _pick(rng: np.random.Generator, words: tuple[str, ...]) -> str:
    return words[int(rng.integers(len(words)))]


def _capital(s: str) -> str:
    return s[:1].upper() + s[1:]


def sentence(rng: np.random.Generator) -> str:
    """One news sentence."""
    if rng.random() < 0.3:
        return _pick(rng, EXTRA).format(n=f"{rng.integers(1, 9)}.{rng.integers(1, 10)}",
                                        p=f"{rng.integers(2, 40)}.{rng.integers(0, 10)}",
                                        k=int(rng.integers(2, 30)), t=_pick(rng, TITLES), name=_pick(rng, NAMES),
                                        subject=_pick(rng, SUBJECTS))
    return (f"{_capital(_pick(rng, SUBJECTS))} in {_pick(rng, PLACES)} {_pick(rng, VERBS)} {_pick(rng, OBJECTS)} "
            f"{_pick(rng, WHEN)} {_pick(rng, REASONS)}.")


def article_and_highlights(index: int, seed: int = 0) -> tuple[str, str]:
    """(article, reference summary) of synthetic sample ``index``; deterministic in (seed, index)."""
    rng = np.random.default_rng((seed, index, 7))
    sentences = [sentence(rng) for _ in range(int(rng.integers(4, 12)))]
    article = " ".join(sentences)
    if rng.random() < 0.3:
        article = f"By {_pick(rng, NAMES).upper()} . PUBLISHED: {int(rng.integers(1, 29))} March . " + article
    chosen = sorted(rng.choice(len(sentences), size=min(len(sentences), int(rng.integers(1, 4))), replace=False))
    summary = " ".join(sentences[i] for i in chosen)
    if rng.random() < 0.5:  # highlights often come as separate lines
        summary = summary.replace(". ", " .\n", 1)
    return article, summary


def corpus() -> list[str]:
    """The text the tiny tokenizer is trained on: every word list in sentences, and a spread of samples."""
    lines = [" ".join(words) for words in (NAMES, TITLES, PLACES, SUBJECTS, VERBS, OBJECTS, WHEN, REASONS, EXTRA)]
    lines += ["Summarize the following news article in 128 tokens. Please output the summary only, without any "
              "other text.\n\nArticle:\n\n\nSummary:"]
    for i in range(200):
        lines.extend(article_and_highlights(i, seed=12345))
    return lines
