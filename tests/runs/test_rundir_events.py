"""The metrics events' contract (rundir/events.py): the trainer writes, and the readers on both sides
compare with, only the declared event names; the design document names each of them."""

from __future__ import annotations

import ast
from pathlib import Path

from mw_env.rundir.events import EVENT_NAMES, FINISH_REASONS

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "mw_env"


def _is_event_key(node: ast.AST) -> bool:
    """`e.get("event")` or `e["event"]`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "event"
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "event"
    )


def _names_used() -> dict[str, str]:
    """Every event name the trainer writes (`.log("name", ...)`, `{"event": "name"}`) or a reader of a run
    folder compares with (`e.get("event") == "name"`), with where."""
    found: dict[str, str] = {}
    for folder in ("trainer", "runs"):
        for path in sorted((SRC / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            where = path.relative_to(REPO).as_posix()
            for node in ast.walk(tree):
                names: list[object] = []
                if isinstance(node, ast.Compare) and _is_event_key(node.left):
                    names = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "log"
                    and isinstance(node.func.value, ast.Attribute | ast.Name)
                    and "metrics" in ast.unparse(node.func.value)
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names = [node.args[0].value]
                elif isinstance(node, ast.Dict):
                    names = [
                        v.value
                        for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant) and k.value == "event" and isinstance(v, ast.Constant)
                    ]
                for name in names:
                    found.setdefault(str(name), f"{where}:{node.lineno}")  # type: ignore[attr-defined]
    return found


# Events of `train watch --json` (its own stream, not metrics.jsonl): the state moves and the anomalies.
WATCH_ONLY = {"anomaly"}


def test_every_event_name_written_or_read_is_declared() -> None:
    used = _names_used()
    assert {"step", "eval", "finished", "checkpoint"} <= set(used)  # the scan sees the writers and readers
    unknown = {n: w for n, w in used.items() if n not in EVENT_NAMES and n not in WATCH_ONLY}
    assert not unknown, f"event names outside rundir_events.EventName: {unknown}"


def test_the_design_document_lists_every_event_and_reason() -> None:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    missing = [n for n in (*EVENT_NAMES, *FINISH_REASONS) if f"`{n}`" not in text and f'"{n}"' not in text]
    assert not missing, f"docs/design.md (Run folder) does not name {missing}"
