from django.urls import path, register_converter

from benchmarks import views, views_schedules


class PublicIdConverter:
    """A permalink id as models.new_public_id makes them (URL-safe base64): anything else is not a
    route at all, so no lookup ever sees NUL or stray characters."""
    regex = "[A-Za-z0-9_-]{1,32}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(PublicIdConverter, "public_id")


class FingerprintConverter(PublicIdConverter):
    """A workload fingerprint (history.workload_fingerprint): 16 hexadecimal digits."""
    regex = "[0-9a-f]{16}"


register_converter(FingerprintConverter, "fingerprint")

urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("runs/new/", views.run_new, name="run-new"),
    path("inventory/", views.inventory, name="inventory"),
    path("r/<public_id:public_id>/", views.run_detail, name="run-detail"),
    path("r/<public_id:public_id>/progress.json", views.run_progress, name="run-progress"),
    path("r/<public_id:public_id>/cancel/", views.run_cancel, name="run-cancel"),
    path("r/<public_id:public_id>/archive/", views.run_archive, name="run-archive"),
    path("r/<public_id:public_id>/delete/", views.run_delete, name="run-delete"),
    path("r/<public_id:public_id>/charts/<str:name>.<str:fmt>", views.run_chart, name="run-chart"),
    path("r/<public_id:public_id>/export.json", views.run_export, name="run-export"),
    path("r/<public_id:public_id>/requests.csv", views.run_requests_csv, name="run-requests-csv"),
    path("r/<public_id:public_id>/quality.csv", views.run_quality_csv, name="run-quality-csv"),
    path("r/<public_id:public_id>/schedule/", views_schedules.run_schedule, name="run-schedule"),
    path("schedules/", views_schedules.schedule_list, name="schedule-list"),
    path("s/<public_id:public_id>/", views_schedules.schedule_detail, name="schedule-detail"),
    path("s/<public_id:public_id>/<str:action>/", views_schedules.schedule_action, name="schedule-action"),
    path("history/<fingerprint:fingerprint>/", views_schedules.history_page, name="history"),
    path("history/<fingerprint:fingerprint>/<str:name>.<str:fmt>", views_schedules.history_chart,
         name="history-chart"),
    path("account/tokens/", views.api_tokens, name="api-tokens"),
    path("account/tokens/<public_id:public_id>/revoke/", views.api_token_revoke, name="api-token-revoke"),
    path("imports/", views.import_new, name="import-new"),
    path("i/<public_id:public_id>/", views.import_detail, name="import-detail"),
    path("i/<public_id:public_id>/throughput.<str:fmt>", views.import_chart, name="import-chart"),
    path("compare/", views.comparison_new, name="comparison-new"),
    path("c/<public_id:public_id>/", views.comparison_detail, name="comparison-detail"),
    path("c/<public_id:public_id>/throughput.<str:fmt>", views.comparison_chart, name="comparison-chart"),
    path("c/<public_id:public_id>/quality.csv", views.comparison_quality_csv, name="comparison-quality-csv"),
]
