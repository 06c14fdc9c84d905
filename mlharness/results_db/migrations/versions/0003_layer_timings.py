"""layer_timings: the standalone kernel time of a layer configuration on a host and runtime, measured by
``mlharness analyze lower-bound`` once and read by every later analysis.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "layer_timings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("host", sa.String(64), primary_key=True),
        sa.Column("op_type", sa.String(256), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("host_text", sa.Text(), nullable=False),
        sa.Column("median_s", sa.Float(), nullable=False),
        sa.Column("q1_s", sa.Float(), nullable=False),
        sa.Column("q3_s", sa.Float(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("measured_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("layer_timings")
