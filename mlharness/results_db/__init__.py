"""The evaluation database: every run folder of a results root indexed in one place and queried across runs.

An embedded SQLite file in the results root by default (``mlharness_results.sqlite``), or a PostgreSQL server given
by URL, with the same schema (SQLAlchemy models and Alembic migrations). ``mlharness results`` queries it; ``report``
and ``compare`` accept a query as well as folders.
"""
