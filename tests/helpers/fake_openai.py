"""The fast fake OpenAI-compatible server (:mod:`mlharness.measurement.fake_openai`) for tests: ``with
FakeOpenAI(tokens=8, delay_s=0.0) as server: ... server.url ... server.stats()``; ``token_ids(prompt, n)`` are the
ids it answers ``prompt`` with."""

from mlharness.measurement.fake_openai import DEFAULT_VOCAB, FakeOpenAI, token_ids

__all__ = ["DEFAULT_VOCAB", "FakeOpenAI", "token_ids"]
