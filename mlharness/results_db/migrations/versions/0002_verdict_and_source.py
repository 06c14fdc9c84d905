"""The round's waiver beside the verdict, and which code made a run: runs.waived (why a run LoadGen calls INVALID
is VALID under its round's rules), runs.git_dirty and runs.label. Every row indexed before is read again at the
next indexing (its signature cleared), so a result the round waives stops showing INVALID and the commit its
metadata records fills git_commit.

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("git_dirty", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("label", sa.String(256), nullable=True))
        batch.add_column(sa.Column("waived", sa.Text(), nullable=True))
    runs = sa.table("runs", sa.column("signature", sa.String(64)))
    op.execute(runs.update().values(signature=""))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("waived")
        batch.drop_column("label")
        batch.drop_column("git_dirty")
