"""Write the SQL of a new MLflow store's schema, as the installed MLflow's own
migrations build it, to ``orchestrator/projections/mlflow_schemas/mlflow-<version>.sql``.

nestor makes each run directory's store from that file (``store_schema``) rather than
running MLflow's dozen migrations at every run's start. Run this after changing the
pinned MLflow; ``tests/orchestrator/projections/test_store_schema.py`` fails until the
file matches what the installed MLflow builds.

    .venv/bin/python scripts/mlflow_schema.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from nestor.orchestrator.projections.store_schema import (
    SCHEMAS,
    build_by_migrations,
    dump_schema,
    mlflow_version,
)

HEADER = ("-- A new MLflow {version} SQLite store (tables, indexes, rows), as MLflow's own\n"
          "-- migrations build it; written by scripts/mlflow_schema.py, checked by\n"
          "-- tests/orchestrator/projections/test_store_schema.py. Do not edit.\n")


def main() -> int:
    version = mlflow_version()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "mlflow.db"
        build_by_migrations(db)
        sql = HEADER.format(version=version) + dump_schema(db)
    out = SCHEMAS / f"mlflow-{version}.sql"
    out.write_text(sql)
    print(f"wrote {out} ({len(sql.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
