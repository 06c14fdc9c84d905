"""The session kind: multi-turn conversations with tool calls, one LoadGen sample per session (docs/sessions.md).

- what a session is: an ordered list of turns (``model.py``); traces in the formats users bring become sessions
  (``traces.py``, ``trace_agentic.py``, ``trace_mooncake.py``, ``trace_rows.py``), or are made up (``synth.py``);
- who answers a turn: an engine (``engine.py``): an OpenAI-compatible endpoint (``openai_engine.py``), a
  transformers model (``transformers_engine.py``), the recorded answers (``oracle.py``, framework
  ``session-oracle``);
- the player that sends a session's turns in order with their think times, building each turn's history from
  the answers (``replay.py``), and the prefix-cache figures (``cache_metrics.py``);
- in a LoadGen run: the ``type: session`` input (``input.py``), the session SUT (``sut.py``), its calibration
  (``calibrate.py``), the per-turn and per-session records (``records.py``, ``report.py``), the report's section
  (``plots.py``) and the kind's row (``kind.py``)."""
