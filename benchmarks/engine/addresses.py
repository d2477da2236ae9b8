"""Where a worker may send requests: the endpoint address policy.

A base URL is read exactly as httpx reads it (what httpx cannot parse is refused), and its host
as the system resolver will read it when the worker connects: `2852039166`, `0xa9fea9fe`,
`0251.0376.0251.0376` and `169.254.43518` are all 169.254.169.254 to `getaddrinfo`, and
`::ffff:169.254.169.254` reaches it over IPv6. Blocked: link-local addresses (where cloud
metadata services answer), the other cloud metadata addresses, 0.0.0.0/8 and `::` (they reach
this machine), multicast, broadcast and reserved ranges, and IPv6 addresses that embed a
blocked IPv4 address (mapped, translated, NAT64, 6to4, Teredo). Loopback and private ranges
are allowed: inference servers live there. `AddressPolicy(allowed=...)` further restricts
endpoints to a deployment's own networks.

A host name is only a name until the worker connects: the transport (transport.py) resolves
it then, refuses it when any of its addresses is refused, and connects to the very addresses
it checked, so a DNS answer that changes between the check and the connection cannot
redirect the worker.
"""
from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Names of cloud metadata services (compared without case and trailing dot).
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal"})
# Cloud metadata and platform services, named in messages; those outside the blocked ranges
# below are blocked by address.
METADATA_ADDRESSES = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata",
    ipaddress.ip_address("169.254.170.2"): "cloud metadata: AWS containers",
    ipaddress.ip_address("fd00:ec2::254"): "AWS",
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud",
    ipaddress.ip_address("168.63.129.16"): "Azure WireServer",
}
BLOCKED_NETWORKS = [(ipaddress.ip_network(net), what) for net, what in [
    ("0.0.0.0/8", "in 0.0.0.0/8, which reaches this machine"),
    ("169.254.0.0/16", "link-local"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
    ("::/128", "the unspecified address, which reaches this machine"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
]]
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_FORMS = [(ipaddress.ip_network(net), how) for net, how in [
    ("::ffff:0:0:0/96", "IPv4-translated"), ("64:ff9b::/96", "NAT64"), ("::/96", "IPv4-compatible")]]
_NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")  # what inet_aton may read as an IPv4 address
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def parse_networks(text: str | list[str] | tuple[str, ...]) -> tuple[IPNetwork, ...]:
    """Networks from "10.0.0.0/8, fd00::/8" (or a list of such strings); ValueError names a bad one."""
    items = text.split(",") if isinstance(text, str) else text
    networks = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as exc:
            raise ValueError(f"{item!r} is not a network in CIDR notation ({exc})") from None
    return tuple(networks)


def host_address(host: str) -> IPAddress | None:
    """The address the system resolver reads `host` as without asking DNS (IPv6 literals, and
    IPv4 in any form inet_aton accepts: decimal, hex, octal, with fewer than four parts); None
    for a host name."""
    host = host.rstrip(".") if host.endswith(".") and not host.endswith("..") else host
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(host) and any(c.isdigit() for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str, bool] | None:
    """The IPv4 address an IPv6 address carries, how, and whether a connection to it goes to
    that IPv4 address (so that address alone decides)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped", True
    if ip in _NAT64_LOCAL:  # RFC 6052 with a /48 prefix: bits 48-63 and 72-87
        packed = ip.packed
        return ipaddress.IPv4Address(packed[6:8] + packed[9:11]), "NAT64", True
    for network, how in _IPV4_FORMS:
        if ip in network and int(ip) > 1:  # not :: or ::1
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), how, how != "IPv4-compatible"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4", False
    if ip.teredo is not None:
        return ip.teredo[1], "Teredo", False
    return None


def _blocked(ip: IPAddress) -> str:
    """Why no inference server can be at `ip` ("is link-local (cloud metadata)"), or ""."""
    metadata = METADATA_ADDRESSES.get(ip)
    for network, what in BLOCKED_NETWORKS:
        if ip.version == network.version and ip in network:
            return f"is {what}" + (f" ({metadata})" if metadata else "")
    if metadata:
        return f"is a cloud metadata address ({metadata})"
    if ip.version == 6 and ip.is_reserved and not ip.is_loopback:
        return "is in reserved IPv6 space"
    return ""


LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


@dataclass(frozen=True)
class AddressPolicy:
    """The blocked ranges are always refused; `allowed`, when given, is the only place endpoints
    may be (empty: anywhere else). `internal` (None: no such rule, as for endpoints, which live on
    private networks) makes every address that is not global — loopback, private, shared
    (100.64/10), unique-local — refused unless inside one of its networks (webhooks: what a
    member names must not let them probe the site's own network); `internal_setting` names the
    setting that lists them, for the messages."""

    allowed: tuple[IPNetwork, ...] = ()
    internal: tuple[IPNetwork, ...] | None = None
    internal_setting: str = ""

    @classmethod
    def from_setting(cls, networks: str | list[str] | tuple[str, ...]) -> "AddressPolicy":
        return cls(allowed=parse_networks(networks))

    @classmethod
    def public_unless(cls, networks: str | list[str] | tuple[str, ...], setting: str) -> "AddressPolicy":
        """Public addresses only, and the internal ones inside `networks` (named by `setting`)."""
        return cls(internal=parse_networks(networks), internal_setting=setting)

    def _internal_reason(self, ip: IPAddress) -> str:
        if self.internal is None or ip.is_global:
            return ""
        if any(ip.version == net.version and ip in net for net in self.internal):
            return ""
        what = ("loopback" if ip.is_loopback else "a private address" if ip.is_private
                else "not a public address")
        listed = ", ".join(map(str, self.internal)) or "none"
        return f"is {what}, allowed only inside {self.internal_setting or 'the allowed networks'} ({listed})"

    def _outside(self, *ips: IPAddress) -> bool:
        return bool(self.allowed) and not any(
            ip.version == net.version and ip in net for ip in ips for net in self.allowed)

    def reason(self, ip: IPAddress) -> str:
        """Why a worker may not connect to `ip` ("is link-local (cloud metadata)"), or ""."""
        outside = f"is outside the allowed networks ({', '.join(map(str, self.allowed))})"
        if ip.version == 6:
            embedded = _embedded_ipv4(ip)
            if embedded is not None:
                v4, how, decides = embedded
                why = _blocked(v4)
                if why:
                    return f"embeds {v4} ({how}), which {why}"
                if decides:
                    internal = self._internal_reason(v4) and self._internal_reason(ip)
                    if internal:
                        return f"embeds {v4} ({how}), which {internal}"
                    return outside if self._outside(ip, v4) else ""
        why = _blocked(ip) or self._internal_reason(ip)
        if why:
            return why
        return outside if self._outside(ip) else ""

    def url_problem(self, url: str) -> str:
        """Why `url` cannot be an endpoint's base URL, or "" when it can. Host names pass here
        (they are checked when the worker connects); addresses are judged in every spelling."""
        try:
            parsed = httpx.URL(url)
            host = parsed.raw_host.decode("ascii")
        except (httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
            return f"Not a valid URL: {exc}."
        if parsed.scheme not in ("http", "https"):
            return "Use an http:// or https:// URL."
        if not host:
            return "The URL has no host."
        if parsed.userinfo:
            return "Put credentials in the API key field, not in the URL."
        if parsed.port is not None and not 0 < parsed.port < 65536:
            return f"Port {parsed.port} is out of range (1-65535)."
        if b"?" in parsed.raw_path or "#" in url:
            return "The base URL takes no query string or fragment."
        if parsed.path.rstrip("/").endswith("/v1"):
            return "Give the server root without /v1 (the client adds /v1/... itself)."
        ip = host_address(host)
        if ip is None:
            name = host.lower().removesuffix(".")
            if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
                return f"{host} is not a valid host name."
            if name in METADATA_HOSTS:
                return f"{name} is a metadata service, not an inference server."
            if self.internal is not None and (name in LOCAL_NAMES or name.endswith(".localhost")):
                why = self._internal_reason(ipaddress.ip_address("127.0.0.1"))
                return self._spelled(host, why) if why else ""
            return ""
        why = self.reason(ip)
        if not why:
            return ""
        spelled = host if ip.version == 6 or str(ip) == host else f"{host} (that is, {ip})"
        return self._spelled(spelled, why)

    @staticmethod
    def _spelled(spelled: str, why: str) -> str:
        if why.startswith("is outside") or "allowed only inside" in why:
            return f"{spelled} {why}."
        return f"{spelled} {why}, not an inference server."

    def resolved_problem(self, host: str, addresses: list[str]) -> str:
        """Why the worker may not connect to `host`, which resolved to `addresses`, or "":
        every one of them must be allowed."""
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            why = self.reason(ip)
            if why:
                if host_address(host) is not None:
                    same = ip.version == 6 or str(ip) == host
                    return f"{host} {why}" if same else f"{host} (that is, {ip}) {why}"
                return f"{host} resolves to {ip}, which {why}"
        if not addresses:
            return f"{host} resolves to no address"
        return ""


async def getaddrinfo(host: str, port: int) -> list[tuple]:
    """The resolver the transport connects through (one place, so tests can stand in for DNS)."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
