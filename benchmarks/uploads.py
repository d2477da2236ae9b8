"""Upload limits enforced while the request arrives, not after it has been stored.

- RequestSizeLimitMiddleware refuses (413) a request whose Content-Length is above the import
  limit plus 1 MiB for the other fields, before anything reads its body. Under WSGI Django never
  reads more than Content-Length (and nothing without one), so this bounds every request.
- FileSizeLimitHandler, first of FILE_UPLOAD_HANDLERS, stops receiving a file part as soon as it
  passes the limit, so at most the limit is ever written to FILE_UPLOAD_TEMP_DIR; the import form
  then says why its file is missing (`request.upload_refused`).
"""
from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import JsonResponse
from django.shortcuts import render


OTHER_FIELDS_BYTES = 1024 * 1024  # the form's other fields and the multipart framing


def file_limit_bytes() -> int:
    return settings.MAX_IMPORT_MIB * 1024 * 1024


def limit_text() -> str:
    return f"{settings.MAX_IMPORT_MIB} MiB"


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # Django reads no body then
        if length > file_limit_bytes() + OTHER_FIELDS_BYTES:
            # At least 1 MiB over the limit, so one decimal always shows the difference.
            message = (f"This upload is {length / (1024 * 1024):.1f} MiB; a result file may be at most {limit_text()}. "
                       "Nothing was read or stored.")
            if request.content_type == "application/json" or request.path.startswith("/api/"):
                return JsonResponse({"error": message}, status=413)
            return render(request, "benchmarks/upload_too_large.html", {"message": message}, status=413)
        return self.get_response(request)


class FileSizeLimitHandler(FileUploadHandler):
    def receive_data_chunk(self, raw_data, start):
        if start + len(raw_data) > file_limit_bytes():
            self.request.upload_refused = (f"{self.file_name} is larger than the limit of {limit_text()}; "
                                           "it was not stored.")
            raise StopUpload(connection_reset=True)  # stop reading: the rest is never received
        return raw_data

    def file_complete(self, file_size):
        return None  # the next handler (memory or temporary file) keeps the file
