from django.urls import path

from benchmarks import views_decide, views_ledger
from benchmarks.urls import PublicIdConverter  # noqa: F401 (registers the public_id converter)

urlpatterns: list = [
    path("decide/", views_decide.decision_new, name="decision-new"),
    path("d/<str:public_id>/", views_decide.decision_detail, name="decision-detail"),
    path("api/decide", views_decide.decision_api, name="decision-api"),
    path("p/<public_id:public_id>/", views_ledger.prediction_detail, name="prediction-detail"),
    path("accuracy/", views_ledger.accuracy, name="accuracy"),
    path("accuracy/chart.json", views_ledger.accuracy_chart, name="accuracy-chart"),
    path("accuracy/ledger.csv", views_ledger.accuracy_csv, name="accuracy-csv"),
]
