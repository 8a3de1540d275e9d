"""Reading machine files for detection while recording, as notes, every file that could not be read."""

from __future__ import annotations

from dataclasses import dataclass, field

from mw_env.hardware.facts import DeviceNode
from mw_env.hardware.machine import Machine

# procfs sysctl files (/proc/sys/...) fail a read() of >= 4 MiB with ENOMEM (KMALLOC_MAX_SIZE), and no file
# detection reads is near 1 MiB, so every read asks for less.
MAX_READ = 1024 * 1024


@dataclass
class Probe:
    """A Machine plus the notes detection collects; every read is best-effort and never raises."""

    machine: Machine
    notes: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def text(self, rel: str, *, required: bool = False) -> str | None:
        """The text of a file, or None. Problems become notes naming the file.

        A missing file is noted only when `required` (sysfs has many optional files); a file that exists
        but cannot be read, is a folder, or holds binary garbage is always noted.
        """
        data = self.machine.read_bytes(rel, max_bytes=MAX_READ)
        if data is None:
            if self.machine.is_dir(rel):
                self.note(f"/{rel}: is a folder where a file was expected; ignored")
            elif self.machine.exists(rel):
                self.note(f"/{rel}: exists but cannot be read (permission denied?); ignored")
            elif required:
                self.note(f"/{rel}: missing")
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.note(f"/{rel}: not text (binary garbage); ignored")
            return None
        if "\x00" in text:
            self.note(f"/{rel}: not text (contains NUL bytes); ignored")
            return None
        return text

    def line(self, rel: str, *, required: bool = False) -> str | None:
        """The first line of a file, stripped; None when missing, unreadable or empty."""
        text = self.text(rel, required=required)
        if text is None:
            return None
        value = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not value:
            if required:
                self.note(f"/{rel}: empty")
            return None
        return value

    def hex_id(self, rel: str, *, required: bool = False, width: int = 4) -> str | None:
        """A sysfs hex id such as `0x1002` as lower-case hex without `0x` ("1002"); None if garbled."""
        value = self.line(rel, required=required)
        if value is None:
            return None
        try:
            number = int(value, 16)
        except ValueError:
            self.note(f"/{rel}: {value[:40]!r} is not a hex number; ignored")
            return None
        return f"{number:0{width}x}"

    def integer(self, rel: str, *, required: bool = False) -> int | None:
        value = self.line(rel, required=required)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            self.note(f"/{rel}: {value[:40]!r} is not an integer; ignored")
            return None

    def key_values(self, rel: str, *, required: bool = True) -> dict[str, int] | None:
        """A KFD-style `name integer` file as a dict; malformed lines are noted and skipped."""
        text = self.text(rel, required=required)
        if text is None:
            return None
        values: dict[str, int] = {}
        bad: list[str] = []
        for raw in text.splitlines():
            parts = raw.split()
            if not parts:
                continue
            if len(parts) != 2:
                bad.append(raw.strip()[:40])
                continue
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                bad.append(raw.strip()[:40])
        if bad:
            shown = ", ".join(repr(b) for b in bad[:3]) + (" ..." if len(bad) > 3 else "")
            self.note(f"/{rel}: {len(bad)} line(s) are not 'name integer' ({shown}); ignored them")
        return values

    def device_node(self, path: str) -> DeviceNode:
        """What the current user can do with a device node inside this container."""
        m = self.machine
        st = m.stat(path)
        if st is None:
            return DeviceNode(path=path, exists=m.exists(path))
        return DeviceNode(
            path=path,
            exists=True,
            is_char=st.kind == "char",
            readable=m.can_access(path, write=False),
            writable=m.can_access(path, write=True),
            mode=f"{st.mode:04o}",
            uid=st.uid,
            gid=st.gid,
            group=m.group_name(st.gid),
        )


def node_notes(nodes: tuple[DeviceNode, ...]) -> list[str]:
    """Facts about a GPU's device nodes worth a line in `mw-env detect` (the doctor gives the fixes)."""
    notes = []
    for node in nodes:
        if not node.exists:
            notes.append(
                f"{node.path} is missing in this container (the host has this GPU: not passed through)"
            )
        elif not node.is_char:
            notes.append(f"{node.path} is not a character device")
        elif not node.writable:
            owner = node.group or (f"gid {node.gid}" if node.gid is not None else "?")
            notes.append(f"{node.path} is not read/writable by this user (mode {node.mode}, group {owner})")
    return notes
