"""The data card (data_card.json) as report blocks, whatever keys it has.

The card grows with the data pipeline (per-shard rows, lengths, rows consumed, epochs, ...), so it is
rendered by shape, not by a fixed list of keys: scalars go into one overview table, a list of records
becomes a table (the shards), a mapping of per-split counts becomes one table with a column per split
(the tag distribution), and a histogram (`{"counts": [...], "bin_width": w}`) becomes a bar figure.
Anything else is shown as compact JSON. Nothing in here may fail on an unexpected card.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mw_env.trainer.report.doc import Bullets, Cell, Code, DocBlock, Fig, Heading, Para, Table, kv_table
from mw_env.trainer.report.figures import Figure

MAX_LIST = 20  # a list of scalars longer than this is summarised
MAX_ROWS = 200  # rows of a table from a list of records

HistogramDrawer = Callable[[str, str, Sequence[float], float], Figure | None]


def label(key: str) -> str:
    return key.replace("_", " ")


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def fmt(value: object, key: str = "") -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if any(w in key for w in ("seed", "id", "version")) else f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str, separators=(", ", ": "))


def _cell(value: object, key: str = "") -> Cell:
    return fmt(value, key) if _scalar(value) else Code(fmt(value))


def is_histogram(value: object) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("counts"), list)
        and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in value["counts"])
        and isinstance(value.get("bin_width"), (int, float))
        and value["bin_width"] > 0
    )


def _records_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    shown = rows[:MAX_ROWS]
    numeric = tuple(
        i
        for i, c in enumerate(columns)
        if all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in shown)
    )
    body = tuple(tuple(_cell(r.get(c, ""), c) for c in columns) for r in shown)
    return Table(header=tuple(label(c) for c in columns), rows=body, numeric=numeric)


def _split_table(value: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> Table:
    """{"train": {tag: n}, "val": {tag: n}} -> rows per tag, a column per split."""
    keys: list[str] = [k for k in order if any(k in inner for inner in value.values())]
    for inner in value.values():
        keys += [k for k in inner if k not in keys]
    splits = list(value)
    rows = tuple((k, *(_cell(value[s].get(k, 0)) for s in splits)) for k in keys)
    return Table(header=("", *splits), rows=rows, numeric=tuple(range(1, len(splits) + 1)))


def _histogram_blocks(key: str, title: str, hist: Mapping[str, Any], draw: HistogramDrawer) -> list[DocBlock]:
    counts, width = hist["counts"], float(hist["bin_width"])
    blocks: list[DocBlock] = [Heading(title, 3)]
    stats = [(label(k), _cell(v)) for k, v in hist.items() if k not in ("counts", "bin_width") and _scalar(v)]
    stats.append(("bin width", fmt(hist["bin_width"])))
    fig_title = f"{title[:1].upper()}{title[1:]}: rows per bin of {width:g}"
    figure = draw(f"data_{key}".replace(" ", "_"), fig_title, counts, width) if any(counts) else None
    if figure is not None:
        blocks.append(Fig(figure))
    else:  # no plotting library, or nothing counted: the non-empty bins as a table
        rows = tuple((f"{k * width:g} to {(k + 1) * width:g}", fmt(n)) for k, n in enumerate(counts) if n)
        blocks.append(Table(header=("range", "rows"), rows=rows, numeric=(1,)))
    blocks.append(kv_table(stats))
    return blocks


def _value_blocks(
    key: str, value: Any, order: Sequence[str], draw: HistogramDrawer, depth: int = 0
) -> list[DocBlock]:
    title = label(key)
    if value is None or (isinstance(value, (list, Mapping)) and not value):
        return []  # nothing recorded (a BIO-examples list with no examples): no empty heading
    if is_histogram(value):
        return _histogram_blocks(key, title, value, draw)
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        blocks: list[DocBlock] = [Heading(title, 3), _records_table(value)]
        if len(value) > MAX_ROWS:
            blocks.append(Para(f"first {MAX_ROWS} of {len(value):,} rows; all of them in data_card.json"))
        return blocks
    if isinstance(value, list):
        return [Heading(title, 3), Bullets(tuple(_cell(v) for v in value[: MAX_LIST * 5]))]
    if isinstance(value, Mapping) and value:
        inner = list(value.values())
        if all(isinstance(v, Mapping) and all(_scalar(x) for x in v.values()) for v in inner):
            return [Heading(title, 3), _split_table(value, order)]
        if all(_scalar(v) for v in inner):
            pairs = [(label(k), _cell(v, k)) for k, v in value.items() if v is not None]
            return [Heading(title, 3), kv_table(pairs)] if pairs else []
        if depth < 2:
            out: list[DocBlock] = []
            scalars = [(label(k), _cell(v)) for k, v in value.items() if _scalar(v) and v is not None]
            if scalars:
                out += [Heading(title, 3), kv_table(scalars)]
            for k, v in value.items():
                if not _scalar(v):
                    out += _value_blocks(f"{key} {k}", v, order, draw, depth + 1)
            return out
    return [Heading(title, 3), Bullets((Code(fmt(value)),))]


def card_blocks(card: object, draw: HistogramDrawer) -> list[DocBlock]:
    """Blocks for the data card; `draw(name, title, counts, bin_width)` makes a histogram figure or None."""
    if not isinstance(card, Mapping) or not card:
        return [Para("No data card was recorded for this run.")]
    order = [str(x) for x in card.get("labels") or [] if _scalar(x)]
    overview: list[tuple[str, Cell]] = []
    rest: list[DocBlock] = []
    for key, value in card.items():
        if value is None:
            continue  # a setting that does not apply to this run (`window blocks null`): not shown
        if _scalar(value):
            overview.append((label(key), _cell(value, key)))
        elif (
            isinstance(value, list)
            and len(value) <= MAX_LIST
            and all(_scalar(v) and len(fmt(v)) <= 40 for v in value)
        ):
            overview.append((label(key), ", ".join(fmt(v) for v in value) if value else "none"))
        elif (
            isinstance(value, Mapping)
            and value
            and all(_scalar(v) for v in value.values())
            and len(value) <= 8
        ):
            shown = [f"{label(k)} {fmt(v)}" for k, v in value.items() if v is not None]
            if shown:
                overview.append((label(key), ", ".join(shown)))
        else:
            rest += _value_blocks(str(key), value, order, draw)
    return ([kv_table(overview)] if overview else []) + rest
