"""Secrets in URLs never reach a message: ``redact`` is the one redaction every error, warning,
store name (``ZStore.display``), CLI line and repr goes through, and ``refuse_credentials`` refuses
a URL that carries ``user:password@`` before any request is made.

What counts as a secret in a URL (anywhere in a text, so a whole message can be passed):

* the userinfo ``user:password@`` (or ``token@``) of ``scheme://...`` URLs. A password holding a
  ``/`` (40% of AWS secret keys) ends the authority early for a URL parser
  (``s3://AKIA:abc/def@bucket`` reads as host ``AKIA:abc``), so an ``@`` later in the path after an
  authority with a ``:`` counts too: a path with an ``@`` behind a ``host:port`` is then shown as
  ``https://***@...``, which costs a readable name, never a secret;
* the value of query or fragment parameters named like a secret (``X-Amz-Signature``,
  ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``sig``, ``token``, ``password``, ``secret``,
  ``key``, ``api_key``, ``access_token``, ``credential``, ``auth``, ...).

Credentials in ``storage_options`` are never formatted into a message here (only option *names*
are), and obstore's reprs show the bucket only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "has_credentials", "redact", "refuse_credentials", "shown"]

REDACTED = "***"

#: a URL inside any text: its scheme and what follows up to white space or a quote
_URL = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>`]*)")

#: names of query/fragment parameters whose value is a secret (presigned URLs, SAS, API keys)
_SECRET_NAME = re.compile(
    r"(?:secret|token|passw|pwd|signature|credential|auth|session|apikey|api[_-]?key|private|"
    r"^sig$|^key$|^code$|[_-]key$)", re.IGNORECASE)
_PARAM = re.compile(r"(?P<lead>[?&#;,])(?P<name>[^=&#;?\s'\"]+)=(?P<value>[^&#;\s'\"]*)")


def _userinfo_end(hier: str) -> int:
    """Where the userinfo of ``scheme://<hier>`` ends (the index of its ``@``), or -1 when none."""
    slash = hier.find("/")
    authority = hier if slash < 0 else hier[:slash]
    if "@" in authority:
        return authority.rindex("@")
    if ":" in authority and "@" in hier:  # user:pass/with/slashes@host, where the parser stops at
        return hier.rindex("@")  # the '/' (or host:port/path@x: ambiguous, shown as ***@x, never a leak)
    return -1


def _redact_url(m: re.Match[str]) -> str:
    scheme, rest = m.group("scheme"), m.group("rest")
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    hier, tail = rest[:cut], rest[cut:]
    at = _userinfo_end(hier)
    if at >= 0:
        hier = f"{REDACTED}{hier[at:]}"

    def param(p: re.Match[str]) -> str:
        if _SECRET_NAME.search(p.group("name")):
            return f"{p.group('lead')}{p.group('name')}={REDACTED}"
        return p.group(0)

    return scheme + hier + _PARAM.sub(param, tail)


def redact(text: object, secrets: Iterable[object] = ()) -> str:
    """``str(text)`` with the secrets of every URL in it, and each of ``secrets`` (values a caller
    knows to be secret, e.g. from ``storage_options``) wherever it appears, replaced by ``***``."""
    s = str(text)
    for secret in secrets:
        if isinstance(secret, str) and len(secret) >= 4:  # (a one-letter "secret" would mask words)
            s = s.replace(secret, REDACTED)
    if "://" not in s:
        return s
    return _URL.sub(_redact_url, s)


def shown(target: Any) -> str:
    """How a user's target (a path, a URL, a zarr-python Store) is named in messages: its text, or
    the Store's repr, redacted."""
    return redact(os.fspath(target) if isinstance(target, str | os.PathLike) else repr(target))


def has_credentials(target: str) -> bool:
    """Whether the URL ``target`` carries a userinfo (``user:password@``, ``token@``)."""
    m = _URL.match(target.strip())
    if m is None:
        return False
    rest = m.group("rest")
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    hier = rest[:cut]
    slash = hier.find("/")
    authority = hier if slash < 0 else hier[:slash]
    if "@" in authority:
        return True
    # a password holding '/' (s3://KEY:abc/def@bucket): the authority ends in a ':' that is no port
    return ":" in authority and "@" in hier and not authority.rsplit(":", 1)[1].isdigit()


def refuse_credentials(target: str) -> None:
    """Raise before any request when the URL ``target`` carries credentials; the message never
    repeats them and says where credentials go instead."""
    if not has_credentials(target):
        return
    from ..errors import ZStringsError

    raise ZStringsError(
        f"Cannot use {redact(target)}: the URL holds credentials (user:password@), which are never "
        "taken from a URL (they would be sent, logged and shown as part of it). Remove them from the "
        "URL and pass them as storage_options={'key': ..., 'secret': ..., 'token': ...}, or set the "
        "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) environment variables."
    )
