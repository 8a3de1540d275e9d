#!/usr/bin/env python3
"""No behaviour change, shown: the JSON of `detect`, `profiles` (the list and each profile), `bootstrap --dry-run`,
and `train config` / `train summary` of every shipped config (src/mw_env/trainspec/configs) on every fixture machine
(tests/fixtures/machines/*), captured before a change and compared after it, byte for byte (stdlib only).

    python3 scripts/same_json.py capture /tmp/before.json     # on the tree before (e.g. main)
    python3 scripts/same_json.py compare /tmp/before.json     # on the tree after (e.g. the ladder move)

Each command runs as `mw-env` does (`python -m mw_env`, the interpreter of --python, default .venv/bin/python)
in a fresh process, with the fixture's fake commands first on PATH (as the tests do) and no MW_ENV_* variable.
What differs between two checkouts by place alone is normalised: the repository root becomes <repo>, the
scratch venv folder <venv>. Everything else - keys, order, spacing, exit code, the stderr's first line - must be
identical. Exit status: 0 identical, 1 a difference (each one shown), 2 bad use.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MACHINES = REPO / "tests" / "fixtures" / "machines"
CONFIGS = REPO / "src" / "mw_env" / "trainspec" / "configs"


def _run(python: str, args: list[str], *, root: Path | None, venv_dir: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MW_ENV_")}
    if root is not None and (root / ".mw-env-bin").is_dir():
        env["PATH"] = f"{root / '.mw-env-bin'}:{env.get('PATH', '')}"
    proc = subprocess.run([python, "-m", "mw_env", *args], cwd=REPO, env=env, capture_output=True, text=True)

    def norm(text: str) -> str:
        return text.replace(venv_dir, "<venv>").replace(str(REPO), "<repo>")

    err = norm(proc.stderr).strip().splitlines()
    return {
        "argv": [norm(a) for a in args],
        "rc": proc.returncode,
        "stdout": norm(proc.stdout),
        "stderr_first": err[0] if err else "",
    }


def capture(python: str) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="same-json-") as tmp:
        venv = str(Path(tmp) / "venv")
        out["profiles"] = _run(python, ["profiles", "--json"], root=None, venv_dir=tmp)
        names = _profile_names(out["profiles"]) if out["profiles"]["rc"] == 0 else []
        for name in names:
            out[f"profiles {name}"] = _run(python, ["profiles", name, "--json"], root=None, venv_dir=tmp)
        for root in sorted(p for p in MACHINES.iterdir() if p.is_dir()):
            rel = root.relative_to(REPO).as_posix()
            out[f"detect {root.name}"] = _run(
                python, ["detect", "--json", "--root", rel], root=root, venv_dir=tmp
            )
            out[f"bootstrap {root.name}"] = _run(
                python,
                ["bootstrap", "--dry-run", "--json", "--root", rel, "--venv", venv],
                root=root,
                venv_dir=tmp,
            )
            # The profile (so the default config, the memory fit) follows the machine: each config on each one.
            for config in sorted(p.stem for p in CONFIGS.glob("*.yaml")):
                for sub in ("config", "summary"):
                    out[f"train {sub} {config} {root.name}"] = _run(
                        python,
                        ["train", sub, "--config", config, "--json", "--root", rel],
                        root=root,
                        venv_dir=tmp,
                    )
    return out


def _profile_names(result: dict[str, object]) -> list[str]:
    data = json.loads(str(result["stdout"]))
    items = data.get("profiles", data) if isinstance(data, dict) else data
    if isinstance(items, dict):
        return sorted(items)
    return sorted(str(p["name"]) for p in items if isinstance(p, dict) and "name" in p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("capture", "compare"))
    ap.add_argument("file", type=Path)
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    args = ap.parse_args()
    now = capture(args.python)
    if args.action == "capture":
        args.file.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        bad = [k for k, v in now.items() if v["rc"] not in (0, 1)]
        print(f"captured {len(now)} outputs into {args.file}" + (f"; exit 2+ for {bad}" if bad else ""))
        return 0
    before = json.loads(args.file.read_text(encoding="utf-8"))
    differ = 0
    for key in sorted(set(before) | set(now)):
        a, b = before.get(key), now.get(key)
        if a == b:
            continue
        differ += 1
        print(f"--- {key}: differs")
        if a is None or b is None:
            print("    only " + ("after" if a is None else "before"))
            continue
        for field in ("argv", "rc", "stderr_first"):
            if a[field] != b[field]:
                print(f"    {field}: {a[field]!r} -> {b[field]!r}")
        diff = difflib.unified_diff(
            str(a["stdout"]).splitlines(), str(b["stdout"]).splitlines(), lineterm="", n=1
        )
        for line in list(diff)[2:40]:
            print("    " + line)
    print(f"{len(now)} outputs compared, {differ} differ" + ("" if differ else ": byte-identical"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
