"""Run files: the one write path for everything agentgrad writes.

Three rules, in one place:

- **Safe names.** A sample id (from a dataset, a user, an LLM) becomes a file name by
  :func:`safe_name`: an id made only of ``A-Z a-z 0-9 . _ -`` that does not start with ``.`` and has
  at most 100 characters is used as it is; any other id keeps its allowed characters (others become
  ``_``, cut to 80) and gets ``-`` plus the first 10 hex digits of the SHA-256 of the id appended,
  so ``a/b`` and ``a_b`` never share a file. Two samples whose names still coincide (the same id
  twice) are refused by :class:`NameRegistry` with a one-line error naming both.
- **Confinement.** :meth:`RunFiles.path` resolves a relative path inside the run directory and
  refuses absolute paths, ``..`` and symbolic links that lead outside it.
- **No silent replacement.** Every write is atomic (temporary file, fsync, rename; a kill leaves the
  old file or the new one, and :meth:`RunFiles.clean_temporary` removes what a kill left).
  :func:`check_new_output` refuses an ``--out`` that holds something the command did not create
  unless ``--overwrite`` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from agentgrad.errors import ConfigError, RunError

_SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_TMP = re.compile(r"^\..+\.\d+\.\d+\.tmp$")  # what write_atomic leaves behind when killed


def safe_name(raw: Any) -> str:
    """The file name (without extension) for a sample id; see the module docstring for the rule."""
    s = str(raw)
    if _SAFE.fullmatch(s):
        return s
    kept = re.sub(r"[^A-Za-z0-9._-]", "_", s).lstrip(".")[:80]
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{kept}-{digest}" if kept else digest


class NameRegistry:
    """Safe names handed out in one run; the same name for two different samples is an error."""

    def __init__(self, what: str = "sample"):
        self.what = what
        self._owner: dict[str, str] = {}
        self._lock = threading.Lock()

    def claim(self, raw: Any, owner: str | None = None) -> str:
        """The safe name of ``raw``; ``owner`` (default: the id) says who holds it in errors."""
        name, who = safe_name(raw), owner if owner is not None else repr(str(raw))
        with self._lock:
            prev = self._owner.setdefault(name, who)
        if prev != who:
            raise RunError(f"{self.what}s {prev} and {who} would both be written as {name!r}; "
                           f"give every {self.what} a distinct id")
        return name


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` so that a crash leaves either the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: str | os.PathLike, line: str, durable: bool = False) -> None:
    """Append one line (a JSONL record) to ``path``; after a line a killed process left unfinished,
    on a line of its own (else the unfinished line would swallow it, and a reader that skips cut
    lines would lose both). ``durable``: flushed and fsynced before returning."""
    with open(path, "a+b") as f:
        cut = False
        if f.seek(0, 2) > 0:
            f.seek(-1, 2)
            cut = f.read(1) != b"\n"
        f.write((("\n" if cut else "") + line + "\n").encode("utf-8"))
        if durable:
            f.flush()
            os.fsync(f.fileno())


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_atomic` of ``data`` as indented JSON."""
    write_atomic(Path(path), json.dumps(data, ensure_ascii=False, indent=1))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


class RunFiles:
    """Paths and writes confined to one run directory."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        """``root/parts...``, refused when it would lie outside the run directory."""
        rel = Path(*parts)
        if rel.is_absolute() or ".." in rel.parts:
            raise RunError(f"refusing to write {rel}: run files must stay inside {self.root}")
        full = self.root / rel
        root = self.root.resolve()
        if not _inside(full.resolve(), root):  # a symbolic link leading out
            raise RunError(f"refusing to write {full}: it leads outside the run directory {self.root}")
        return full

    def write_json(self, *parts: str, data: Any) -> Path:
        p = self.path(*parts)
        write_json_atomic(p, data)
        return p

    def write_text(self, *parts: str, text: str) -> Path:
        p = self.path(*parts)
        write_atomic(p, text)
        return p

    def clean_temporary(self) -> int:
        """Remove the temporary files that a killed write left behind; returns how many."""
        n = 0
        if not self.root.is_dir():
            return 0
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                if _TMP.match(f):
                    Path(dirpath, f).unlink(missing_ok=True)
                    n += 1
        return n


def check_new_output(out: Path, overwrite: bool, kind: str = "file", protect: list[Path] | None = None,
                     own: tuple[str, ...] = ()) -> None:
    """Refuse an output that would replace something, unless ``overwrite``; never one of ``protect``.

    ``kind`` is ``file`` (``out`` must not exist) or ``dir`` (``out`` must not exist or be empty).
    ``protect`` lists paths that even ``--overwrite`` may not touch (the inputs being read): ``out``
    may not be one of them, nor contain or lie inside one. ``own``: names of files the run itself put in
    the ``dir`` before (its fetched input): they do not make it non-empty.
    """
    out_r = out.resolve()
    for p in protect or []:
        p_r = p.resolve()
        if out_r == p_r or _inside(out_r, p_r) or _inside(p_r, out_r):
            raise RunError(f"--out {out} would overwrite the input {p}; choose another --out")
    if not out.exists():
        return
    if kind == "file":
        if out.is_dir():
            raise RunError(f"--out {out} is a directory; give a file name")
        if not overwrite:
            raise RunError(f"--out {out} exists; pass --overwrite to replace it, or choose another --out")
        return
    if not out.is_dir():
        raise RunError(f"--out {out} exists and is not a directory")
    if any(p.name not in own for p in out.iterdir()) and not overwrite:
        raise RunError(f"--out {out} is not empty; pass --overwrite to write into it, or choose another --out")


# The first bytes of binary files a user may hand over by mistake, named in the one-line error.
_MAGIC = ((b"\x1f\x8b", "a gzip archive"), (b"PK\x03\x04", "a zip archive"), (b"\x89PNG", "a PNG image"),
          (b"%PDF", "a PDF document"), (b"\xff\xd8\xff", "a JPEG image"), (b"SQLite format 3\x00", "an SQLite database"),
          (b"GGUF", "a GGUF model file"), (b"\x7fELF", "an executable"), (b"BZh", "a bzip2 archive"),
          (b"\xfd7zXZ", "an xz archive"), (b"\x28\xb5\x2f\xfd", "a zstd archive"))


def _binary_kind(head: bytes) -> str | None:
    """What a file's first bytes say it is when it is not text (None: it may be text)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if b"\x00" in head:  # no text file holds a NUL byte (UTF-16 aside, which is not what the formats are)
        return "binary data"
    return None


def read_text(path: str | os.PathLike, what: str = "file", error: type[Exception] | None = None,
              expected: str | None = None) -> str:
    """A UTF-8 text file's content, or a one-line error (``error``, default ConfigError) saying why not.

    ``what`` names the file in the message ("trace file"; "" for the bare path). With ``expected``
    (what a user's file should hold: "chat JSONL", ...) an empty or binary file is refused too, and
    the message says what the file is and what was expected.
    """
    err = error or ConfigError
    p = Path(path)
    name = f"{what} {p}" if what else str(p)
    give, not_it = (f"; give {expected}", f", so it is not {expected}") if expected else ("", "")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise err(f"{name} does not exist{give}") from None
    except IsADirectoryError:
        raise err(f"{name} is a directory, not a file{give}") from None
    except OSError as e:
        raise err(f"cannot read {name}: {e.strerror or e}") from None
    if expected is not None:
        if not data.strip():
            raise err(f"{name} is empty ({'0 bytes' if not data else 'only whitespace'}){not_it}")
        kind = _binary_kind(data[:65536])
        if kind is not None:
            raise err(f"{name} is {kind} (not UTF-8 text){not_it}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise err(f"{name} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line {line})"
                  f"{not_it}; save it as UTF-8") from None
