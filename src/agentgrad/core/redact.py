"""Secrets never reach a file or the console: one rule for everything agentgrad writes or prints.

- A mapping key that names a credential has its value replaced by ``<redacted>``. A key is a
  credential when one of its words (split at ``_``, ``-``, ``.``, spaces and camelCase) is one of
  :data:`CREDENTIAL_WORDS` (``api_key``, ``token``, ``secret``, ``password``, ``authorization``, ...).
  Keys ending in ``_env`` name an environment variable, not its value, and are kept; counts such
  as ``prompt_tokens`` (plural) are kept.
- In every string, the user information of a URL (``http://user:KEY@host``) becomes ``***``, and
  query parameters named like credentials (``?api_key=...``, ``&token=...``) lose their values.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
CREDENTIAL_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "authorization", "auth", "credential",
    "credentials", "cookie", "bearer", "passphrase",
})
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s@?#]+)@")
_QUERY = re.compile(r"(?P<pre>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<value>[^&;#\s]+)")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")


def is_credential_key(key: Any) -> bool:
    """Whether a mapping key names a credential (see the module docstring)."""
    if not isinstance(key, str) or key.lower().endswith("_env"):
        return False
    words = [w.lower() for w in _WORDS.findall(key)]
    return any(w in CREDENTIAL_WORDS for w in words) or "apikey" in key.lower().replace("_", "").replace("-", "")


def redact_text(text: str) -> str:
    """``text`` with URL user information, credential query values and bearer tokens removed."""
    if "://" not in text and "=" not in text and "earer" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)
    text = _QUERY.sub(lambda m: m["pre"] + (REDACTED if is_credential_key(m["name"]) else m["value"]), text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def redacted(data: Any) -> Any:
    """A copy of ``data`` (dicts, lists, strings) fit to be written or printed."""
    if isinstance(data, dict):
        return {k: (REDACTED if is_credential_key(k) and v not in (None, "") else redacted(v)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redacted(v) for v in data]
    if isinstance(data, str):
        return redact_text(data)
    return data
