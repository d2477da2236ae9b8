"""410 Gone for the permalinks of deleted runs: a page that says which run it was and when it
was deleted, or JSON for the API and the JSON addresses (selectors.RunGone)."""
from django.http import JsonResponse
from django.shortcuts import render

from benchmarks.selectors import RunGone


class RunGoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, RunGone):
            return None
        deleted = exception.deleted
        if request.path.startswith("/api/") or request.path.endswith(".json"):
            return JsonResponse({"error": deleted.note, "public_id": deleted.public_id,
                                 "deleted": deleted.deleted.isoformat()}, status=410)
        return render(request, "410.html", {"deleted": deleted}, status=410)
