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
]
