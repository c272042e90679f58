"""The request desk's pages (askdb/views_requests.py), under /requests/."""

from django.urls import path

from askdb import views_requests

app_name = "requests"
urlpatterns = [
    path("", views_requests.request_queue, name="queue"),
    path("<int:request_id>/", views_requests.request_detail, name="detail"),
]
