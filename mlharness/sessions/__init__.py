"""Sessions: multi-turn conversations, tool calls and trace replay.

A session is an ordered list of turns (``model``); an engine answers one turn (``engine``: an OpenAI-compatible
endpoint, an in-process model, an oracle); the player sends a session's turns in order, with their think times,
building each turn's history from the answers (``replay``); traces in the formats users bring become sessions
(``traces``). In a LoadGen run one sample is one session (``mlharness/kinds/sessions/sut.py``): see docs/sessions.md
for why.
"""
