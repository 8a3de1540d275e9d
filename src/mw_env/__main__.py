from __future__ import annotations

from mw_env.cli import run

raise SystemExit(run())
