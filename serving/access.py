"""Who may use a ``crossmodal serve``: the convention of Jupyter's server. On the loopback interface (the
default, 127.0.0.1) only this machine's users can connect, and no token is needed unless one is given. Bound
to anything else, the server requires a token — given with ``--token`` or ``CROSSMODAL_TOKEN``, or generated
and printed once — on every route but the page's static files: as ``Authorization: Bearer TOKEN``, an
``X-Crossmodal-Token`` header, a ``token`` query parameter (a link to the page), or the cookie the page sets
when it is opened with ``?token=``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass

TOKEN_ENVIRONMENT = "CROSSMODAL_TOKEN"
TOKEN_HEADER = "x-crossmodal-token"
TOKEN_COOKIE = "crossmodal_token"
#: requests that need no token: the page's scripts and styles hold no data
PUBLIC_PREFIXES = ("/static/",)


class AccessError(ValueError):
    """A serve setting that would expose the server unsafely, or a bad token."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address only this machine can reach (``localhost`` included)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: resolved by the system, possibly to a public address
        return False


@dataclass(frozen=True)
class Access:
    """The token a server requires (None: none) and whether it was generated here (then it is printed)."""

    token: str | None
    generated: bool = False

    def allows(self, presented: list[str | None]) -> bool:
        """Whether any of the ``presented`` credentials is the token (compared in constant time)."""
        if self.token is None:
            return True
        return any(
            value is not None and secrets.compare_digest(value.encode(), self.token.encode())
            for value in presented
        )


def resolve_access(host: str, token: str | None, environment: dict[str, str] | None = None) -> Access:
    """The access rule for a server bound to ``host``: the given token, else the environment's, else (off the
    loopback interface) a generated one."""
    environment = os.environ if environment is None else environment
    token = token if token is not None else environment.get(TOKEN_ENVIRONMENT)
    if token is not None:
        if len(token) < 8 or any(c.isspace() for c in token):
            raise AccessError("a token needs at least 8 characters and no spaces")
        return Access(token)
    if is_loopback(host):
        return Access(None)
    return Access(secrets.token_urlsafe(24), generated=True)
