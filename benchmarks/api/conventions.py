"""How every API answer is shaped: pages of results, and errors as {"error", "errors"} (the
shape POST /api/decide has always answered). Named in settings.REST_FRAMEWORK."""
import traceback

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler


class Pages(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


def echoable(value):
    """Error data with any lone surrogate (valid in JSON, not in UTF-8) written as \\udxxx: an
    error that echoes what was sent must still encode, or the answer becomes a 500."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {echoable(k): echoable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [echoable(v) for v in value]
    return value


def invalid(errors: dict, status: int = 400, error: str = "invalid input") -> Response:
    """A field-style error answer: {"error", "errors": {field: [messages]}}, safe to encode."""
    return Response({"error": echoable(error), "errors": echoable(errors)}, status=status)


def _while_parsing(exc) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return any(frame.filename.endswith("rest_framework/parsers.py") for frame in frames)


def json_errors(exc, context):
    """The REST framework's errors in this site's JSON shape (the one POST /api/decide answers)."""
    if isinstance(exc, RequestDataTooBig):  # Django's own answer would be an HTML 400
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = f"The body is larger than the limit of {limit:,} bytes; nothing was read."
        return invalid({"__all__": [message]}, status=413, error=message)
    if isinstance(exc, RecursionError) and _while_parsing(exc):  # json gives up on deep nesting: not a 500
        return invalid({"__all__": ["The JSON body is nested too deeply."]})
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
    response.data = echoable(response.data)
    return response
