"""Webhook delivery, Django-free: a JSON body POSTed to a URL, signed with HMAC-SHA256 when the
hook has a secret, through connections that go only where the address policy allows (the host
is resolved, every address checked, and the checked address connected to: no second lookup).

The signature travels as `X-V100-Signature: sha256=<hex>` over the exact body bytes, with
`X-V100-Timestamp` (Unix seconds) inside the signed text as `<timestamp>.<body>`, so that a
receiver can refuse a replayed old body.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from dataclasses import dataclass

import httpcore
import httpx

from benchmarks.engine.addresses import AddressPolicy

SIGNATURE_HEADER = "X-V100-Signature"
TIMESTAMP_HEADER = "X-V100-Timestamp"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class AddressRefused(httpcore.ConnectError):
    """The hook's host is, or resolves to, an address the policy refuses."""


class CheckedSyncBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, connecting only to addresses `policy` allows (TLS still names
    and verifies the URL's host)."""

    def __init__(self, policy: AddressPolicy):
        self.policy = policy
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = [info[4][0] for info in infos]
        problem = self.policy.resolved_problem(host, addresses)
        if problem:
            raise AddressRefused(f"refused: {problem}")
        last: Exception | None = None
        for address in addresses:
            try:
                return self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                              socket_options=socket_options)
            except httpcore.ConnectError as exc:
                last = exc
        raise last or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(self, *args, **kwargs):
        raise httpcore.ConnectError("webhooks go over TCP only")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def url_problem(url: str, policy: AddressPolicy) -> str:
    """Why `url` cannot be a webhook, or "": an http(s) URL whose host the policy allows (any path
    and query; the host checked as an endpoint's is, and again, resolved, at each delivery)."""
    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decodes an IDNA name: "xn--" is an error here, not at delivery
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeError) as exc:
        return f"Not a valid URL: {exc}."
    if parsed.scheme not in ("http", "https") or not host:
        return "Use an http:// or https:// URL with a host."
    if "#" in url:
        return "A webhook URL takes no fragment."
    if parsed.userinfo:  # it would be stored and shown back in full: the secret field signs instead
        return "A webhook URL must not carry a user name or password: give the receiver's secret instead."
    netloc = parsed.netloc.decode("ascii", "replace")
    problem = policy.url_problem(f"{parsed.scheme}://{netloc}/")
    return problem.replace("an inference server", "a webhook receiver")


@dataclass
class Attempt:
    """One try: the answer's status code (None when none came) and what went wrong ("" when the
    hook answered 2xx)."""

    status_code: int | None
    error: str

    @property
    def ok(self) -> bool:
        return not self.error


def post(url: str, payload: dict, *, secret: str = "", policy: AddressPolicy | None = None,
         timeout_s: float = 10.0, now: float | None = None) -> Attempt:
    """POST `payload` as JSON to `url` once. Never raises for what the network or the hook does."""
    policy = policy or AddressPolicy()
    problem = url_problem(url, policy)
    if problem:
        return Attempt(None, problem)
    body = json.dumps(payload, sort_keys=True).encode("utf-8")
    timestamp = int(now if now is not None else time.time())
    headers = {"Content-Type": "application/json", "User-Agent": "v100site-webhook", TIMESTAMP_HEADER: str(timestamp)}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    transport = httpx.HTTPTransport()
    transport._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(),
                                              network_backend=CheckedSyncBackend(policy))
    try:
        with httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False) as client:
            response = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return Attempt(None, f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= response.status_code < 300:
        return Attempt(response.status_code, "")
    return Attempt(response.status_code, f"answered {response.status_code} {response.reason_phrase}"[:500])
