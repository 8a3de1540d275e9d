"""The corpus index: each shard's blocks and identity, and a label sample, built once per run.

Built by one process (rank 0) and handed to the others (a broadcast), so N ranks do not open every
footer N times against the same storage. Each Parquet footer is read once (hashed and parsed from
the same bytes); a JSONL shard is scanned once for its line offsets. The result is cached in
`<run>/corpus-index.json` under each shard's file identity (path, size, mtime, ctime, inode), so a resume
or a second run over the same folder reads no footer and scans no JSONL again.

Labels (when `data.labels` is unset): every distinct tag of every row group of each Parquet shard, read
from the tags column's dictionary pages (trainspec/formats/tagdict.py: a few hundred bytes at the head of each
column chunk, no row decoded, read with the footer's descriptor): a rare tag that first appears in a later
row group is found before step 1. A shard without them (tags not dictionary-encoded, an unknown codec) and
a JSONL shard: the tags of its first LABEL_SAMPLE_ROWS rows, from the tags column only, marked sampled
(`tags_sampled`): the run says so at start, with the `data.labels` line to paste, because a tag the sample
missed is met later as an error naming the shard and the row from its start (or line). Why not a full pass
there: it is a read of the whole corpus before step 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mw_env.base.errors import InputError, MwEnvError
from mw_env.rundir.contract import CORPUS_INDEX
from mw_env.trainer.data import shards as shards_mod
from mw_env.trainer.data.shards import Block, Shard
from mw_env.trainspec.columns import as_string_lists
from mw_env.trainspec.formats.tagdict import row_groups_tags

if TYPE_CHECKING:
    import pyarrow.parquet as pq

LABEL_SAMPLE_ROWS = 4096  # per shard
VERSION = 2  # 2: every row group's dictionary (1 read the first only), `tags_sampled`
Cache = dict[str, Any]  # the run folder's index cache: shard key -> its footer facts (JSON)
Tags = tuple[list[str], bool] | None  # a shard's distinct tags and whether they were only sampled
T = TypeVar("T")


def _stat_key(path: Path, columns: tuple[str, str]) -> tuple[str, os.stat_result]:
    # ctime too: no tool can set it back, so a shard rewritten with its old size and mtime is read again.
    st = os.stat(path)
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{columns[0]}|{columns[1]}"
    return key, st


def sample_tags(
    path: Path,
    kind: str,
    blocks: list[Block],
    columns: tuple[str, str],
    meta: pq.FileMetaData | None,
    leaf: int | None = None,
    fd: int | None = None,
) -> tuple[list[str], bool]:
    """(the distinct tags of the shard, sampled): every row group's, from the tags column's dictionary pages
    (trainspec/formats/tagdict.py); where they are missing, of its first LABEL_SAMPLE_ROWS rows (tags column only),
    sampled when the shard has more. `leaf`: the tags column's leaf index, known from the schema
    (shards.Schemas); `fd`: the file, open."""
    if kind == "jsonl":
        from mw_env.trainer.data.reader import parse_jsonl

        shard = Shard(path, kind, 0, "", blocks)
        seen: set[str] = set()
        _tok, tags, _lines = parse_jsonl(shard, blocks[0], columns, limit=LABEL_SAMPLE_ROWS)
        for row in tags:
            seen.update(row)
        return sorted(seen), len(tags) < shard.rows
    groups = [b.part for b in blocks]
    whole = row_groups_tags(path, meta, columns[1], groups, leaf, fd) if meta is not None else None
    if whole is not None:  # every row group's every tag, from their dictionary pages: no row decoded
        return sorted(whole), False
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, metadata=meta, buffer_size=1 << 20)
        batch = next(pf.iter_batches(batch_size=LABEL_SAMPLE_ROWS, columns=[columns[1]]), None)
        if batch is None:
            return [], False
        uniq = pc.unique(pc.list_flatten(as_string_lists(batch.column(0))))
        return sorted(t for t in uniq.to_pylist() if t is not None), batch.num_rows < sum(
            b.rows for b in blocks
        )
    except UnicodeDecodeError:
        raise InputError(
            f"{path}: a tag in its first rows is not valid UTF-8", hint=shards_mod.HINT_DAMAGED
        ) from None
    except Exception as exc:
        raise InputError(
            f"{path} row group {blocks[0].part}: unreadable ({type(exc).__name__}: {exc})",
            hint=shards_mod.HINT_DAMAGED,
        ) from None


def _entry(shard: Shard, found: tuple[list[str], bool] | None) -> dict[str, Any]:
    return {
        "tags_sampled": bool(found and found[1]),
        "kind": shard.kind,
        "size": shard.size,
        "footer_sha256": shard.footer_sha256,
        "blocks": [[b.part, b.rows, b.start, b.stop, b.first_line] for b in shard.blocks],
        "tags": found[0] if found else None,
    }


def _shard(path: Path, index: int, e: dict[str, Any], st: os.stat_result) -> Shard:
    """The shard of a cache entry, stamped with the stat its key was taken from: the reader compares the
    file with it at every block (shards.check_stamp)."""
    blocks = [Block(index, p, r, a, z, f) for p, r, a, z, f in e["blocks"]]
    stamp = shards_mod.stamp_of(st)
    return Shard(path, e["kind"], e["size"], e["footer_sha256"], blocks, stamp, shards_mod.HOST)


def _index_one(
    path: Path, i: int, columns: tuple[str, str], key: str, labels: bool, schemas: shards_mod.Schemas
) -> tuple[dict[str, Any], Shard]:
    """The shard's cache entry and its Shard. A Parquet shard is opened once: its footer and its tags
    dictionary page are read with the same descriptor."""
    if path.suffix != ".parquet":
        shard = shards_mod._open_jsonl(path, i)
        _no_rows(shard, key)
        found = sample_tags(path, shard.kind, shard.blocks, columns, None) if labels else None
        return _entry(shard, found), shard
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(
            f"{path}: cannot read it ({exc.strerror or exc})", hint=shards_mod.HINT_DAMAGED
        ) from None
    try:
        shard, meta, leaf = shards_mod._open_parquet(path, i, columns, schemas, fd)
        _no_rows(shard, key)
        found = sample_tags(path, shard.kind, shard.blocks, columns, meta, leaf, fd) if labels else None
    finally:
        os.close(fd)
    return _entry(shard, found), shard


def _no_rows(shard: Shard, key: str) -> None:
    if shard.rows == 0:
        raise InputError(f"{key}: {shard.path} has no rows", hint="drop the empty shard from the file list")


def index_shards(
    paths: Sequence[Path], columns: tuple[str, str], *, key: str, labels: bool, cache: Cache
) -> list[tuple[Shard, Tags]]:
    """Each shard and its tags (None when labels are configured); `cache` is read and updated.
    Shards the cache lacks are read one after the other, in list order (the first failing one is the
    error). Not in a thread pool: a shard is ~0.08 ms of CPU (a stat, one open, its footer and tags
    dictionary page: docs/benchmarks.md), and starting 8 threads in a process that has imported torch cost
    more CPU than 80 shards' reads; on high-latency storage the 3 small reads a shard are paid once per run
    folder, then the cache answers."""
    stats, stamps = [], []
    for path in paths:
        try:
            found, st = _stat_key(path, columns)
            stats.append(found)
            stamps.append(st)
        except OSError as exc:
            raise InputError(
                f"{key}: cannot read {path}: {exc.strerror or exc}", hint="check the path"
            ) from None
    todo = [i for i, st in enumerate(stats) if st not in cache or (labels and cache[st].get("tags") is None)]
    schemas = shards_mod.Schemas()
    read: dict[int, Shard] = {}
    for i in todo:
        cache[stats[i]], read[i] = _index_one(paths[i], i, columns, key, labels, schemas)
        read[i].stamp, read[i].host = shards_mod.stamp_of(stamps[i]), shards_mod.HOST
    return [
        (read[i] if i in read else _shard(path, i, cache[st], stamps[i]), _tags(cache[st]))
        for i, (path, st) in enumerate(zip(paths, stats, strict=True))
    ]


def _tags(entry: dict[str, Any]) -> Tags:
    tags = entry.get("tags")
    return None if tags is None else (tags, bool(entry.get("tags_sampled")))


def load_cache(run_dir: Path) -> Cache:
    try:
        data = json.loads((run_dir / CORPUS_INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # a cache: anything unreadable is read again
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != VERSION
        or not isinstance(data.get("shards"), dict)
    ):
        return {}
    return data["shards"]


def save_cache(run_dir: Path, entries: Cache) -> None:
    from mw_env.base.atomic import write_json_atomic

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / CORPUS_INDEX, {"version": VERSION, "shards": entries}, indent=None)
    except OSError:
        pass  # a cache: a read-only run folder costs the next start the footer reads, nothing else


def from_rank0(build: Callable[[], T], world: int) -> T:
    """Rank 0 builds; the others receive it (an error too, so every rank stops with the same message)."""
    if world <= 1:
        return build()
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return build()
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = ("ok", build())
        except MwEnvError as exc:
            box[0] = ("error", type(exc), exc.message, exc.hint)
    dist.broadcast_object_list(box, src=0)
    if box[0][0] == "error":
        _, cls, message, hint = box[0]
        raise cls(message, hint=hint)
    return box[0][1]
