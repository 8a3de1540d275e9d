"""What `mw-env train check` says about a corpus it read (trainspec/datacheck.py's report, as a dict: the same
whether the rows were read here or in the training venv): one finding a line, each error and warning with its
count, the first rows that have it, and what to do (the `--set`, the label list or the conversion to paste)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.rows import ROW_HINT


@dataclass(frozen=True)
class Finding:
    level: str  # "info" | "warning" | "error"
    text: str
    hint: str = ""


def _hints(config: TrainConfig) -> dict[str, str]:
    d, m = config.data, config.model
    return {
        "unreadable": f'each line is one JSON object: {{"{d.tokens_column}": [...], "{d.tags_column}": [...]}}',
        "type": ROW_HINT,
        "null": "fill or drop these rows: every word and every tag is a string",
        "length": "every token needs exactly one BIO tag: fix or drop these rows",
        "text": "re-export the file with UTF-8 text",
        "unknown_tag": "add the tags to data.labels (or leave data.labels empty to take the corpus's), or "
        "--set data.unknown_tags=ignore to train on those words without a label",
        "too_long": f"raise model.max_len (now {m.max_len}) if the last words matter (memory grows with it), "
        "or split such rows; the run's data card counts the words dropped",
        "bio": "an entity should start with B-X; strict IOB2 F1 gives no credit to one that starts with I-X "
        "(conlleval does): check how the corpus was tagged",
        "empty": "drop them",
    }


def findings(report: Mapping[str, object], config: TrainConfig) -> list[Finding]:
    """The report in sentences, in the order a user fixes things: what was read, the tags, each problem."""
    from mw_env.trainspec.labelscan import flow_list, not_bio, not_bio_error

    d = config.data
    files = [f for f in _list(report.get("files")) if isinstance(f, Mapping)]
    rows = _int(report.get("rows"))
    val = sum(_int(f.get("rows")) for f in files if f.get("split") == "val")
    out = [
        Finding(
            "info",
            f"read {len(files)} file(s), {rows:,} rows"
            + (f" ({rows - val:,} train, {val:,} from data.val_files)" if val else "")
            + f": the words from {d.tokens_column!r} (data.tokens_column), the tags from {d.tags_column!r} "
            "(data.tags_column)",
        )
    ]
    tags = report.get("tags")
    names = [str(t) for t in tags] if isinstance(tags, Mapping) else []
    if plain := not_bio(names):
        jsonl = bool(files) and all(f.get("format") == "jsonl" for f in files)
        err = not_bio_error(plain, "the corpus's tags", column=d.tags_column, jsonl=jsonl)
        out.append(Finding("error", err.message, err.hint or ""))
    elif names:
        labels = [str(x) for x in _list(report.get("labels"))]
        shown = ", ".join(labels[:16]) + (", ..." if len(labels) > 16 else "")
        out.append(
            Finding(
                "info",
                f"tags: IOB2, {len(labels)} labels ({report.get('labels_from')}): {shown}",
                "" if d.labels else f"to fix the label set and its order: data: labels: {flow_list(labels)}",
            )
        )
    problems = report.get("problems")
    hints = _hints(config)
    for kind, p in problems.items() if isinstance(problems, Mapping) else ():
        count = _int(p.get("count")) if isinstance(p, Mapping) else 0
        if not count or not isinstance(p, Mapping):
            continue
        first = [str(e) for e in _list(p.get("examples"))]
        more = f", the first {len(first)}: {'; '.join(first)}" if first else ""
        if len(first) == count:  # every row that has it
            more = f": {'; '.join(first)}"
        level = "error" if p.get("error") else "warning"
        out.append(Finding(level, f"{count:,} {p.get('what')}{more}", hints.get(str(kind), "")))
    out += [Finding("info", str(n)) for n in _list(report.get("notes"))]
    return out


def verdict(items: Sequence[Finding]) -> str:
    errors = sum(1 for f in items if f.level == "error")
    warnings = sum(1 for f in items if f.level == "warning")
    if errors:
        return (
            f"{errors} problem(s) would stop training (exit 2 at the row, or at start): fix them and check again"
            + (f"; {warnings} warning(s)" if warnings else "")
        )
    return "ok: nothing here stops training" + (f" ({warnings} warning(s) above)" if warnings else "")


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
