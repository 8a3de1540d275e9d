"""The torch source catalogue (sources.yaml): every torch index described once; profiles name its ids.

A profile's `sources:` lists ids, in its order of preference: `- rocm7.14`, or `- {id: amd-multiarch, default:
true}`, or with a `note:` of its own (what the source means for this GPU). The loader puts the catalogue's entry
in its place, so every reader of a profile keeps getting whole `TorchSource` objects (arch list, index,
devices...). Adding an index is one entry in sources.yaml; the recipe is at the top of that file.

An id described twice in a catalogue file is refused, as is a shipped profile that describes a source itself
(two truths about one index), or a profile naming an id no catalogue has. A user's profile may still describe
a source of its own in full, as before the catalogue: that description is the profile's own. A user's profiles
folder may hold its own sources.yaml: its entries add ids or replace shipped ones (a mirror of an index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.base.errors import InputError

CATALOGUE_FILE = "sources.yaml"
SHIPPED = Path(__file__).resolve().with_name(CATALOGUE_FILE)
# What a profile says about a source it names: the rest is the catalogue's.
PROFILE_OWN = ("id", "default", "note")

Entries = dict[str, tuple[Mapping[str, object], Path]]  # id -> (the catalogue entry, its file)


def _fail(path: Path, key: str, problem: str, hint: str) -> InputError:
    return InputError(f"source catalogue {path}: {key}: {problem}", hint=hint)


def read_file(path: Path, *, shipped: bool = False) -> Entries:
    """One catalogue file's entries, each checked as a torch source; an id described twice is refused."""
    from mw_env.base.userfile import read_text
    from mw_env.profiles.schema import check_source_entry

    text = read_text(path, what="source catalogue")
    data: object = None
    if shipped and path == SHIPPED:
        from mw_env.profiles.index import cached

        data = cached(path.name, text)
    if data is None:
        from mw_env.base.userfile import load_yaml

        data = load_yaml(text, source=f"source catalogue {path}", shipped=shipped)
    if not isinstance(data, Mapping) or not isinstance(data.get("sources"), list) or set(data) != {"sources"}:
        raise _fail(
            path, "(top level)", "expected one key, sources: a list of sources", "see docs/profiles.md"
        )
    out: Entries = {}
    first: dict[str, int] = {}
    for i, entry in enumerate(data["sources"]):
        key = f"sources[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
            raise _fail(
                path, key, "each source is a mapping with an id", "id, build, index_url, version, ..."
            )
        sid = entry["id"]
        if sid in first:
            raise _fail(
                path,
                key,
                f"source {sid!r} is described twice (also sources[{first[sid]}])",
                "describe each index once; profiles name it by id",
            )
        if "default" in entry:
            raise _fail(
                path,
                f"{key}.default",
                "default is a profile's choice",
                "name it in the profile: {id: X, default: true}",
            )
        check_source_entry(entry, path=path, key=key)
        first[sid] = i
        out[sid] = (dict(entry), path)
    return out


def load(folders: Sequence[Path] = ()) -> Entries:
    """The shipped catalogue, then each folder's sources.yaml (later entries replace earlier ones by id)."""
    entries = dict(read_file(SHIPPED, shipped=True))
    for folder in folders:
        path = Path(folder) / CATALOGUE_FILE
        if path.is_file():
            entries.update(read_file(path))
    return entries


def expand(sources: object, catalogue: Entries, *, path: Path, shipped: bool) -> object:
    """A profile's `sources:` with every named id replaced by its catalogue entry (plus the profile's own
    default and note). Anything that is not a list is left for the typed reader to refuse."""
    if not isinstance(sources, list):
        return sources
    out: list[object] = []
    for i, entry in enumerate(sources):
        key = f"profile {path}: sources[{i}]"
        ref = {"id": entry} if isinstance(entry, str) else entry
        if not isinstance(ref, Mapping) or not isinstance(ref.get("id"), str):
            out.append(entry)  # the typed reader names what is wrong with it
            continue
        sid = ref["id"]
        own = set(ref) <= set(PROFILE_OWN)
        if own and sid in catalogue:
            out.append({**catalogue[sid][0], **ref})
            continue
        if own:
            import difflib  # only for a "did you mean"

            close = difflib.get_close_matches(sid, list(catalogue), n=3, cutoff=0.5)
            raise InputError(
                f"{key}: unknown source id {sid!r}: no source catalogue describes it",
                hint=(f"did you mean {', '.join(close)}? " if close else "")
                + f"allowed: {', '.join(catalogue)}, or a source described in full in a user profile",
            )
        if shipped:
            also = f" and in the source catalogue {catalogue[sid][1]}" if sid in catalogue else ""
            raise InputError(
                f"{key}: source {sid!r} is described in a shipped profile{also}",
                hint=f"describe each index once, in {SHIPPED}; a profile names it (`- {sid}`) and says only "
                + ", ".join(PROFILE_OWN[1:]),
            )
        # A user profile's own source, described in full: it is that profile's, even under a catalogued id (a
        # profile written before the catalogue keeps meaning what it said).
        out.append(entry)
    return out


def markdown_table(entries: Entries | None = None) -> str:
    """docs/profiles.md's table of the catalogue, between its `catalogue:begin/end` markers (a test compares)."""
    rows = [
        "| id | build | index | serves | answers for a project it does not hold | torch | download / installed (GB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for sid, (e, _path) in (load() if entries is None else entries).items():
        serves = ", ".join(f"`{x}`" for x in e.get("serves") or ())  # type: ignore[attr-defined]
        unserved = e.get("unserved", 404)
        answer = f"{unserved}" + (
            " (ignore-error-codes = [403] in the torch step)" if unserved == 403 else ""
        )
        sizes = f"{e.get('download_gb') or '-'} / {e.get('installed_gb') or '-'}"
        torch = f"`{e.get('version')}` `{e.get('local_tag')}`"
        rows.append(
            f"| `{sid}` | {e.get('build')} | {e.get('index_url')} | {serves} | {answer} | {torch} | {sizes} |"
        )
    return "\n".join(rows) + "\n"
