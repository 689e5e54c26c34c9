"""What every importer returns: the traces and the records that could not be read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgrad.core.trace import Trace
from agentgrad.errors import ConfigError

FORMATS = ("chat", "otel", "openinference", "whowhen")
WHOWHEN_SUBSETS = {"hand": "Hand-Crafted", "algorithm": "Algorithm-Generated"}


@dataclass
class ImportResult:
    traces: list[Trace] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # "where: what is wrong", one per record not imported


class BadRecord(Exception):
    """A record that cannot be imported (the message names the field)."""


def text_field(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRecord(f"{what} must be a string")
    return value


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


def read_user_text(path: str | Path, expected: str) -> str:
    """The text of a file a user gave, or a one-line :class:`ConfigError` that says what the file is
    (missing, a folder, empty, binary, not UTF-8) and what was ``expected`` ("chat JSONL", ...)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p} does not exist; give {expected}") from None
    except IsADirectoryError:
        raise ConfigError(f"{p} is a directory; give a file: {expected}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {p}: {e.strerror or e}") from None
    if not data.strip():
        raise ConfigError(f"{p} is empty ({'0 bytes' if not data else 'only whitespace'}), so it is not {expected}")
    kind = _binary_kind(data[:65536])
    if kind is not None:
        raise ConfigError(f"{p} is {kind} (not UTF-8 text), so it is not {expected}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{p} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line {line}), "
                          f"so it is not {expected}; save it as UTF-8") from None
