from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from benchmarks import views_decide
from benchmarks.api import ledger, views
from benchmarks.urls import PublicIdConverter  # noqa: F401 (registers the public_id converter)

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("runs/", views.runs, name="api-runs"),
    path("runs/<public_id:public_id>/", views.run_detail, name="api-run"),
    path("runs/<public_id:public_id>/results/", views.run_results, name="api-run-results"),
    path("runs/<public_id:public_id>/requests/", views.run_requests, name="api-run-requests"),
    path("runs/<public_id:public_id>/cancel/", views.run_cancel, name="api-run-cancel"),
    path("runs/<public_id:public_id>/archive/", views.run_archive, name="api-run-archive"),
    path("imports/", views.imports, name="api-imports"),
    path("evaluation-texts/", views.evaluation_texts, name="api-evaluation-texts"),
    path("comparisons/", views.comparisons, name="api-comparisons"),
    path("comparisons/<public_id:public_id>/", views.comparison_detail, name="api-comparison"),
    path("schedules/", views.schedules, name="api-schedules"),
    path("schedules/<public_id:public_id>/", views.schedule_detail, name="api-schedule"),
    re_path(r"^schedules/(?P<public_id>[A-Za-z0-9_-]{1,32})/(?P<action>pause|resume)/$", views.schedule_action,
            name="api-schedule-action"),
    path("endpoints/", views.endpoints, name="api-endpoints"),
    path("hosts/", views.hosts, name="api-hosts"),
    path("models/", views.models, name="api-models"),
    path("decide/", views_decide.decision_api, name="api-decide"),
    path("predictions/<public_id:public_id>/", ledger.prediction_detail, name="api-prediction"),
    path("accuracy/", ledger.accuracy, name="api-accuracy"),
    re_path(r"^[\s\S]*$", views.not_found),  # any address, a newline in it too
]
