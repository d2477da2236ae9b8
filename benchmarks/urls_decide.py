from django.urls import path

from benchmarks import views_decide

urlpatterns: list = [
    path("decide/", views_decide.decision_new, name="decision-new"),
    path("d/<str:public_id>/", views_decide.decision_detail, name="decision-detail"),
    path("api/decide", views_decide.decision_api, name="decision-api"),
]
