from __future__ import annotations

from mw_env.cli import main

raise SystemExit(main())
