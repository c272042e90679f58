"""URL configuration. Every page needs a login except the allow-list in tests/test_urls.py."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from askdb import views

auth_patterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("review/", views.review_queue, name="review_queue"),
    path("audit/", views.audit_log, name="audit_log"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include(auth_patterns)),
    path("catalog/", include("metadata_admin.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("askdb.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("api/docs/", login_required(SpectacularSwaggerView.as_view(url_name="api_schema")), name="api_docs"),
]
