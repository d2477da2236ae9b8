"""Two small pieces of request security: the Content-Security-Policy header and the client
address that login throttling counts."""
from django.conf import settings


class ContentSecurityPolicyMiddleware:
    """Send settings.CONTENT_SECURITY_POLICY with every response that has none of its own.
    (One fixed policy: Django 6.0's own CSP middleware can replace this class.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        return response


def client_ip(request) -> str:
    """The address a request came from. Behind a trusted TLS proxy (BEHIND_TLS_PROXY) it is the
    last X-Forwarded-For entry, the one the proxy appended; any entry before it is whatever the
    client sent. Otherwise the socket's peer, REMOTE_ADDR: a forwarded header is not believed."""
    if settings.BEHIND_TLS_PROXY:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR", "")
