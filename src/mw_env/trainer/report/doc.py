"""The report as a list of blocks, rendered twice: Markdown (report.md) and a styled HTML page (report.html).

The content is built once (report.py, trainer/report/card.py) so the two files can never say different things;
each renderer escapes for its own format (Markdown table pipes, HTML entities), and both show control
characters from the data (a token holding `\x1b]0;…`) escaped by `mw_env.base.textsafe`: a report opened with
`cat` or `less` must not drive the terminal.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.textsafe import safe
from mw_env.trainer.report.figures import Figure


def _t(text: str) -> str:
    """Text fit for either file: control characters escaped, never cut (the report is a record)."""
    return safe(text, limit=None)


@dataclass(frozen=True)
class Code:
    """A cell or item shown in monospace (values, paths, tagged addresses)."""

    text: str


Cell = str | Code


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[Cell, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numeric: tuple[int, ...] = ()  # columns aligned right
    css: str = ""


@dataclass(frozen=True)
class Fig:
    figure: Figure


DocBlock = Heading | Para | Bullets | Table | Fig


def kv_table(pairs: Sequence[tuple[str, Cell]], css: str = "kv") -> Table:
    return Table(header=("", ""), rows=tuple((k, v) for k, v in pairs), css=css)


# ---- Markdown ------------------------------------------------------------------------------------


def _md_cell(cell: Cell) -> str:
    text = _t(cell.text if isinstance(cell, Code) else cell)
    text = text.replace("|", "\\|")
    if isinstance(cell, Code):
        return "`" + text.replace("`", "'") + "`" if text else ""
    return text


def to_markdown(title: str, blocks: Sequence[DocBlock], *, base: Path) -> str:
    lines = [f"# {_t(title)}", ""]
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + _t(block.text), ""]
        elif isinstance(block, Para):
            lines += [_t(block.text), ""]
        elif isinstance(block, Bullets):
            lines += [f"- {_md_cell(item)}" for item in block.items] + [""]
        elif isinstance(block, Table):
            if block.css.startswith("kv"):
                lines += [f"- {_md_cell(key)}: {_md_cell(value)}" for key, value in block.rows] + [""]
                continue
            lines.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
            lines.append(
                "|"
                + "|".join("---:" if i in block.numeric else "---" for i in range(len(block.header)))
                + "|"
            )
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        elif isinstance(block, Fig):
            rel = block.figure.png.relative_to(base).as_posix()
            lines += [f"![{_t(block.figure.title)}]({rel})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---- HTML ----------------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       max-width: 1040px; margin: 2em auto; padding: 0 1.2em; background: #fff; }
h1 { font-size: 1.7em; margin-bottom: .2em; }
h2 { font-size: 1.3em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f4f5f7; font-weight: 600; }
tr:nth-child(even) td { background: #fafbfc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv td:first-child { font-weight: 600; white-space: nowrap; background: #f4f5f7; }
table.summary { font-size: 15px; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f4f5f7;
       padding: 1px 4px; border-radius: 3px; overflow-wrap: anywhere; }
/* A wide table (the shard list, long paths) scrolls inside its own box: the page never scrolls sideways. */
div.table { max-width: 100%; overflow-x: auto; }
p, li, td { overflow-wrap: anywhere; }
figure { margin: 1em 0 1.6em; }
figure svg { width: 100%; max-width: 880px; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
ul { padding-left: 1.4em; }
.muted { color: #666; }
"""


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Code):
        return f"<code>{_h(cell.text)}</code>"
    return _h(cell)


def _h(text: str) -> str:
    return html.escape(_t(text))


def _html_table(block: Table) -> str:
    cls = f' class="{_h(block.css)}"' if block.css else ""
    head = ""
    if any(block.header):
        head = "<thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in block.header) + "</tr></thead>"
    num = ' class="num"'
    body = "".join(
        "<tr>"
        + "".join(f"<td{num if i in block.numeric else ''}>{_html_cell(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in block.rows
    )
    return f'<div class="table"><table{cls}>{head}<tbody>{body}</tbody></table></div>'


def to_html(title: str, blocks: Sequence[DocBlock]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{_h(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            parts.append(f"<p>{_h(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_html_cell(i)}</li>" for i in block.items) + "</ul>")
        elif isinstance(block, Table):
            parts.append(_html_table(block))
        elif isinstance(block, Fig):
            parts.append(
                f'<figure id="fig-{_h(block.figure.name)}">{block.figure.svg}'
                f"<figcaption>{_h(block.figure.title)} "
                f"({_h(block.figure.png.name)})</figcaption></figure>"
            )
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_h(title)}</title><style>{CSS}</style></head>\n<body>\n"
        f"<h1>{_h(title)}</h1>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
