from django.urls import path

from benchmarks import views

urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("runs/new/", views.run_new, name="run-new"),
    path("r/<str:public_id>/", views.run_detail, name="run-detail"),
    path("r/<str:public_id>/progress.json", views.run_progress, name="run-progress"),
    path("r/<str:public_id>/cancel/", views.run_cancel, name="run-cancel"),
    path("r/<str:public_id>/charts/<str:name>.<str:fmt>", views.run_chart, name="run-chart"),
    path("r/<str:public_id>/export.json", views.run_export, name="run-export"),
    path("r/<str:public_id>/requests.csv", views.run_requests_csv, name="run-requests-csv"),
    path("imports/", views.import_new, name="import-new"),
    path("i/<str:public_id>/", views.import_detail, name="import-detail"),
    path("i/<str:public_id>/throughput.<str:fmt>", views.import_chart, name="import-chart"),
    path("compare/", views.comparison_new, name="comparison-new"),
    path("c/<str:public_id>/", views.comparison_detail, name="comparison-detail"),
    path("c/<str:public_id>/throughput.<str:fmt>", views.comparison_chart, name="comparison-chart"),
]
