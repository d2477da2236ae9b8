"""API tokens: how a request made by a script is authenticated and rate limited.

A token travels as `Authorization: Bearer v100_…`. It is an explicit credential (a browser never
sends it by itself), so a request that carries one needs no CSRF token; a request without one is
a browser session's and is CSRF-checked like every form post."""
from __future__ import annotations

import hashlib
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.middleware.csrf import CsrfViewMiddleware
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import authentication, exceptions, throttling

from benchmarks.models import ApiToken

# last_used is written at most this often per token: not one UPDATE per request.
LAST_USED_EVERY = timedelta(minutes=1)
CSRF_REFUSED = ("CSRF check failed: a browser session's POST needs the csrftoken cookie's value in an "
                "X-CSRFToken header; a script should send an API token (Authorization: Bearer …) instead.")


def key_sha256(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class TokenRefused(Exception):
    """Why the Authorization header does not authenticate anyone."""


def token_from_header(header: str) -> ApiToken:
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise TokenRefused("send the API token as 'Authorization: Bearer <token>'")
    token = (ApiToken.objects.select_related("owner").filter(key_sha256=key_sha256(key)).first()
             if key.startswith(ApiToken.KEY_PREFIX) and len(key) <= 100 else None)
    if token is None:
        raise TokenRefused("this API token is not valid; make one on the API tokens page")
    if token.revoked is not None:
        raise TokenRefused(f"this API token was revoked on {token.revoked:%Y-%m-%d %H:%M} UTC")
    if not token.owner.is_active:
        raise TokenRefused("the account of this API token is disabled")
    now = timezone.now()
    if token.last_used is None or now - token.last_used > LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """Django REST framework's side of the tokens: request.user is the owner, request.auth the
    ApiToken row."""

    def authenticate(self, request):
        header = request.headers.get("Authorization")
        if not header:
            return None
        try:
            token = token_from_header(header)
        except TokenRefused as e:
            raise exceptions.AuthenticationFailed(str(e)) from None
        return token.owner, token

    def authenticate_header(self, request):  # makes a refusal a 401 with WWW-Authenticate
        return 'Bearer realm="api"'


class SessionAuthentication(authentication.SessionAuthentication):
    def enforce_csrf(self, request):
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied:
            raise exceptions.PermissionDenied(CSRF_REFUSED) from None


class PerTokenRateThrottle(throttling.SimpleRateThrottle):
    """API_RATE_LIMIT requests per token (a browser session: per member; anonymous readers: per
    address), counted in the cache (Redis when CACHE_URL is set, so all web processes share it)."""

    scope = "api"

    def get_rate(self):
        return settings.API_RATE_LIMIT

    def get_ident(self, request):
        """The site's one client address (v100site.security.client_ip): X-Forwarded-For only
        behind the configured proxy (BEHIND_TLS_PROXY, as the forwarded protocol), and then its
        last entry. DRF's own believes the header from anyone: a new address per request would
        have been a new allowance."""
        from v100site.security import client_ip

        return client_ip(request)

    def get_cache_key(self, request, view):
        token = getattr(request, "auth", None)
        if isinstance(token, ApiToken):
            ident = f"token-{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"address-{self.get_ident(request)}"
        return f"throttle-{self.scope}-{ident}"


def rate_limited(request) -> JsonResponse | None:
    throttle = PerTokenRateThrottle()
    if throttle.allow_request(request, None):
        return None
    wait = throttle.wait() or 1
    return JsonResponse({"error": f"rate limit reached ({settings.API_RATE_LIMIT}); try again in {wait:.0f} s"},
                        status=429, headers={"Retry-After": str(max(1, round(wait)))})


def token_or_session(view):
    """For the JSON views outside the REST framework (POST /api/decide): a bearer token
    authenticates the request without CSRF; a browser session's POST is CSRF-checked and refused
    with a JSON 403. Both are rate limited like the REST API."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        header = request.headers.get("Authorization")
        request.auth = None
        if header:
            try:
                token = token_from_header(header)
            except TokenRefused as e:
                return JsonResponse({"error": str(e)}, status=401, headers={"WWW-Authenticate": 'Bearer realm="api"'})
            request.user, request.auth = token.owner, token
        elif request.user.is_authenticated and request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
            refused = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if refused is not None:
                return JsonResponse({"error": CSRF_REFUSED}, status=403)
        limited = rate_limited(request)
        return limited or view(request, *args, **kwargs)

    return wrapper
