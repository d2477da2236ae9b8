from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico of pages without a <link rel="icon"> (a JSON or CSV opened directly).
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("benchmarks.api.urls")),
    path("", include("benchmarks.urls")),
    path("", include("benchmarks.urls_decide")),
]

handler404 = "benchmarks.views.not_found"
