"""How every API answer is shaped: pages of results, and errors as {"error", "errors"} (the
shape POST /api/decide has always answered). Named in settings.REST_FRAMEWORK."""
from django.conf import settings
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import exception_handler


class Pages(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


def json_errors(exc, context):
    """The REST framework's errors in this site's JSON shape (the one POST /api/decide answers)."""
    response = exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, exceptions.ValidationError) and not (isinstance(data, dict) and set(data) == {"detail"}):
        errors = data if isinstance(data, dict) else {"__all__": data}
        response.data = {"error": "invalid input", "errors": errors}
    else:
        detail = data.get("detail", data) if isinstance(data, dict) else data
        response.data = {"error": str(detail)}
    if isinstance(exc, exceptions.Throttled):
        response.data["error"] = f"rate limit reached ({settings.API_RATE_LIMIT}); try again in {exc.wait or 1:.0f} s"
    return response
