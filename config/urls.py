"""URL configuration. Every page needs a login except the allow-list in tests/test_urls.py."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from askdb import views, views_requests

auth_patterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.history, name="history"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/result/", views.run_result, name="run_result"),
    path("runs/<int:run_id>/result.csv", views.run_csv, name="run_csv"),
    path("runs/<int:run_id>/result.xlsx", views.run_xlsx, name="run_xlsx"),
    path("runs/<int:run_id>/cancel/", views.run_cancel_view, name="run_cancel"),
    path("runs/<int:run_id>/retry/", views.run_retry_view, name="run_retry"),
    path("runs/<int:run_id>/long/", views.run_long_query_view, name="run_long_query"),
    path("runs/<int:run_id>/follow-up/", views.run_follow_up_view, name="run_follow_up"),
    path("runs/<int:run_id>/pick/", views.run_pick_candidate_view, name="run_pick_candidate"),
    path("runs/<int:run_id>/review/", views.run_review, name="run_review"),
    path("runs/<int:run_id>/request/", views_requests.run_request_create, name="run_request"),
    path("requests/", include("askdb.request_urls")),
    path("inbox/", views_requests.inbox, name="inbox"),
    path("inbox/<int:note_id>/", views_requests.inbox_open, name="inbox_open"),
    path("inbox/read/", views_requests.inbox_read_all, name="inbox_read_all"),
    path("runs/<int:run_id>/methods.txt", views.run_methods_txt, name="run_methods"),
    path("review/", views.review_queue, name="review_queue"),
    path("audit/", views.audit_log, name="audit_log"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/", include(auth_patterns)),
    path("catalog/", include("metadata_admin.urls")),
    path("evaluations/", include("evaluation.urls")),
    path("phenotypes/", include("phenotypes.urls")),
    path("library/", include("askdb.library_urls")),
    path("users/", include("askdb.user_urls")),
    path("admin/", admin.site.urls),
    path("api/phenotypes/", include("phenotypes.api_urls")),
    path("api/", include("askdb.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api_schema"),
    path("api/docs/", login_required(SpectacularSwaggerView.as_view(url_name="api_schema")), name="api_docs"),
]
