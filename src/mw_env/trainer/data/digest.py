"""The full-file sha256 of each shard, once, in the background (`data.hash_shards: true`).

Resume checks use the cheap identity (footer hash, sizes, row counts); the full hash is for the
record (the data card), computed by a low-priority thread on rank 0 while training runs and cached
in `<run>/shard-sha256.json` under the shard's identity, so a restart never hashes a shard twice.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mw_env.base.atomic import write_json_atomic
from mw_env.rundir.contract import SHARD_DIGESTS


def _key(identity: dict[str, Any]) -> str:
    return f"{identity['path']}|{identity['size']}|{identity['footer_sha256']}"


class ShardHasher:
    """Hashes shards one after the other in a daemon thread; `done()` is what has finished so far."""

    def __init__(self, identities: Sequence[dict[str, Any]], run_dir: Path) -> None:
        self._path = Path(run_dir) / SHARD_DIGESTS
        try:
            cached = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # a cache: anything unreadable is hashed again
            cached = {}
        if not isinstance(cached, dict):
            cached = {}
        self._lock = threading.Lock()
        self._done: dict[str, str] = {k: v for k, v in cached.items() if isinstance(v, str)}
        self._todo = [i for i in identities if i.get("path") and _key(i) not in self._done]
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="mw-env-shard-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for ident in self._todo:
            h = hashlib.sha256()
            try:
                with open(ident["path"], "rb") as fh:
                    while chunk := fh.read(8 << 20):  # hashlib releases the GIL on large buffers
                        if self._stop.is_set():
                            return
                        h.update(chunk)
            except OSError:
                continue  # the reader reports unreadable shards; this record just lacks the hash
            with self._lock:
                self._done[_key(ident)] = h.hexdigest()
                snapshot = dict(self._done)
            try:
                write_json_atomic(self._path, snapshot)
            except OSError as exc:  # a cache: the card still gets the hashes; never a thread's traceback
                if not self._warned:
                    self._warned = True
                    from mw_env.base.errors import os_words

                    print(
                        f"warning: cannot save the shard hashes to {self._path}: {os_words(exc)}; the data card "
                        "still lists them, the next start hashes again",
                        file=sys.stderr,
                        flush=True,
                    )

    def annotate(self, sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The card's sources with `sha256` where known, `"pending"` where still being computed."""
        with self._lock:
            done = dict(self._done)
        out = []
        for s in sources:
            if s.get("path") and "footer_sha256" in s:
                s = {**s, "sha256": done.get(_key(s), "pending")}
            out.append(s)
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
