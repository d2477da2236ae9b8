from functools import wraps

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse


def permalink(view):
    """Permalink pages open read-only without login, unless PERMALINKS_REQUIRE_LOGIN is set."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if settings.PERMALINKS_REQUIRE_LOGIN and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return view(request, *args, **kwargs)

    return wrapper


def hides_addresses(request) -> bool:
    """Whether this reader of a permalink is kept from the endpoints' base URLs and launch
    commands: anonymous readers are, unless PUBLIC_SHOW_ENDPOINT_ADDRESSES is on. Members see
    them (and who queued a run, which anonymous readers never see)."""
    return not request.user.is_authenticated and not settings.PUBLIC_SHOW_ENDPOINT_ADDRESSES


def api_login_required(view):
    """Like login_required, but a JSON 401 with the reason instead of a redirect."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return JsonResponse({"error": "authentication required: log in first"}, status=401)
        return view(request, *args, **kwargs)

    return wrapper
