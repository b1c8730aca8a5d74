"""Who may use a ``crossmodal serve``: the convention of Jupyter's server. On the loopback interface (the
default, 127.0.0.1) only this machine's users can connect, and no token is needed unless one is given. Bound
to anything else, the server requires a token — given with ``--token`` or ``CROSSMODAL_TOKEN``, or generated
and printed once — on every route but the page's static files: as ``Authorization: Bearer TOKEN``, an
``X-Crossmodal-Token`` header, a ``token`` query parameter (a link to the page), or the cookie the page sets
when it is opened with ``?token=``.

A server without a token answers only requests addressed to this machine by name (the ``Host`` header):
``localhost``, a loopback address, the address it is bound to and the names given with ``--allowed-host``.
Without that check a web page the user visits could re-point its own DNS name at 127.0.0.1 ("DNS
rebinding") and read the archive through the user's browser, which sends ``Host: that-site``; Jupyter's
server refuses such requests the same way. A server with a token needs no such check (the page cannot
present the token) unless ``--allowed-host`` is given.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

TOKEN_ENVIRONMENT = "CROSSMODAL_TOKEN"
TOKEN_HEADER = "x-crossmodal-token"
TOKEN_COOKIE = "crossmodal_token"
#: requests that need no token: the page's scripts and styles hold no data
PUBLIC_PREFIXES = ("/static/",)
MIN_TOKEN_LENGTH = 8
#: characters every form a token travels in carries unchanged: a header, a query parameter (percent-encoded
#: in the printed link) and a cookie (RFC 6265 cookie-octets: printable ASCII but space, '"', ',', ';', '\\')
TOKEN_CHARACTERS = frozenset(chr(c) for c in range(0x21, 0x7F)) - set('",;\\')
#: names that always mean this machine: RFC 6761 keeps ``localhost`` and ``*.localhost`` on the loopback
#: interface (browsers resolve them so themselves), so no other site can own them
LOCAL_NAMES = ("localhost",)


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


def check_token(token: str, source: str) -> None:
    """An :class:`AccessError` naming ``source`` (``--token`` or ``$CROSSMODAL_TOKEN``) when ``token`` could
    not be presented in every form the server reads (a non-ASCII token can never match a header's bytes)."""
    if token == "":
        raise AccessError(f"{source} is empty: give a token of at least {MIN_TOKEN_LENGTH} characters, or unset it")
    odd = sorted({c for c in token if c not in TOKEN_CHARACTERS})
    if odd:
        shown = ", ".join(repr(c) for c in odd[:5])
        raise AccessError(
            f"{source} holds {shown}: a token is printable ASCII without spaces, quotes, commas, semicolons "
            "or backslashes (what a header, a URL and a cookie all carry), e.g. `openssl rand -hex 24`"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        raise AccessError(f"{source} has {len(token)} characters; a token needs at least {MIN_TOKEN_LENGTH}")


def chosen_token(token: str | None, environment: dict[str, str] | None = None) -> tuple[str | None, str]:
    """The token given (``--token``, else ``$CROSSMODAL_TOKEN``; None: neither) and where it came from."""
    environment = os.environ if environment is None else environment
    if token is not None:
        return token, "--token"
    return environment.get(TOKEN_ENVIRONMENT), f"${TOKEN_ENVIRONMENT}"


def resolve_access(host: str, token: str | None, environment: dict[str, str] | None = None) -> Access:
    """The access rule for a server bound to ``host``: the given token, else the environment's, else (off the
    loopback interface) a generated one."""
    token, source = chosen_token(token, environment)
    if token is not None:
        check_token(token, source)
        return Access(token)
    if is_loopback(host):
        return Access(None)
    return Access(secrets.token_urlsafe(24), generated=True)


def host_name(value: str) -> str:
    """The name part of a ``Host`` header or a ``--allowed-host`` value, compared case-insensitively and
    without a trailing dot: ``Evil.Example:8000`` -> ``evil.example``, ``[::1]:8000`` -> ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):  # an IPv6 literal, [address] or [address]:port
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def check_allowed_host(value: str) -> str:
    """A ``--allowed-host`` value as compared (:func:`host_name`), or an :class:`AccessError`."""
    name = host_name(value)
    if not name or any(c.isspace() or c in "/\\?#@" for c in value) or not value.isascii():
        raise AccessError(f"--allowed-host takes a host name or address such as myhost.lan, got {value!r}")
    return name


@dataclass(frozen=True)
class HostCheck:
    """The ``Host`` names a server answers (None: any). ``localhost``, ``*.localhost`` and loopback addresses
    are always allowed; ``names`` adds the bound address and ``--allowed-host``'s."""

    names: frozenset[str] | None

    @classmethod
    def for_server(cls, bound: str, extra: Iterable[str], access: Access) -> HostCheck:
        extra = [check_allowed_host(name) for name in extra]
        if access.token is not None and not extra:
            return cls(None)  # the token keeps other sites out; a proxy may use any name
        return cls(frozenset([host_name(bound), *extra]))

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header may be answered (None: the client sent none, as an
        HTTP/1.0 client may; a browser always sends one, so a page cannot use that)."""
        if self.names is None or host is None:
            return True
        name = host_name(host)
        return name in self.names or name in LOCAL_NAMES or name.endswith(".localhost") or is_loopback(name)

    def other_names(self) -> list[str]:
        """The allowed names beyond localhost and loopback addresses (those are always allowed)."""
        return sorted(name for name in self.names or () if not (name in LOCAL_NAMES or is_loopback(name)))

    def refusal(self, host: str) -> str:
        return (
            f"this server answers requests addressed to localhost or a loopback address"
            f"{''.join(f', {name}' for name in self.other_names())} only, not Host {host[:100]!r} (a page of another site "
            "could read it by pointing its name at this machine); to reach it under that name, start it with "
            "--allowed-host NAME"
        )
