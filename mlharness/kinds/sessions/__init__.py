"""Multi-turn sessions, one per sample: the session input (``input.py``), the session SUT (``sut.py``) and the
per-turn and per-session records (``report.py``); what a session is lives in ``mlharness/sessions/``."""
