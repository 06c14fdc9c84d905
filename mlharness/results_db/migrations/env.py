"""Alembic's environment for the evaluation database, run in-process by :func:`mlharness.results_db.db.upgrade`:
the connection comes from the caller (``config.attributes["connection"]``), so no alembic.ini is needed."""

from __future__ import annotations

from alembic import context

from mlharness.results_db.models import Base

connection = context.config.attributes["connection"]
# SQLite alters a table by copying it: batch mode lets a later revision drop or change a column there
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
