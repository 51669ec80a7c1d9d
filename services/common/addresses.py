"""Is a URL safe to send requests to from inside our network? (webhook receivers)

A receiver on loopback, a private range, link-local (cloud metadata at
169.254.169.254), CGNAT, multicast or any other non-global address is refused
unless private receivers are explicitly allowed. A host name is resolved and
*every* address it has is checked; the notifier checks again when it delivers,
through a resolver that refuses the same addresses, so a name that re-binds to
a private address after registration (DNS rebinding) is still refused, and the
connection goes to an address that was checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

SCHEMES = frozenset({"http", "https"})


class AddressRefusedError(Exception):
    """The URL is malformed or points somewhere we must not send requests."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def is_public(address: str) -> bool:
    """True for a globally routable unicast address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def split_url(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL; AddressRefusedError if it is not one."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AddressRefusedError(f"not a valid URL: {exc}") from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise AddressRefusedError("the URL must be http:// or https:// with a host")
    if parts.username or parts.password:
        raise AddressRefusedError("credentials in the URL are not accepted")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def check_url(url: str, *, allow_private: bool) -> list[str]:
    """Resolve the URL's host; refuse it if any address is not public.

    Returns the addresses (for logging). With ``allow_private`` only the URL's
    shape and that the name resolves are checked.
    """
    host, port = split_url(url)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise AddressRefusedError(f"cannot resolve {host!r}: {exc}") from None
    addresses = sorted({str(info[4][0]) for info in infos})
    if not addresses:
        raise AddressRefusedError(f"{host!r} has no address")
    if not allow_private:
        refused = [a for a in addresses if not is_public(a)]
        if refused:
            raise AddressRefusedError(
                f"{host!r} resolves to a non-public address ({refused[0]}); "
                "private receivers need AGENTBUS_WEBHOOK_ALLOW_PRIVATE=1"
            )
    return addresses


class PublicOnlyResolver(AbstractResolver):
    """aiohttp resolver that refuses a name with any non-public address.

    The connector connects only to addresses this resolver returned, so the
    check and the connection see the same answer (no rebinding in between).
    """

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            if not is_public(result["host"]):
                raise OSError(f"{host!r} resolves to non-public {result['host']}")
        return results

    async def close(self) -> None:
        await self._inner.close()
