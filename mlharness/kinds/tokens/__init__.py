"""Generated token streams: the token SUT (``sut.py``) and the token figures of a run's report (``report.py``)."""
