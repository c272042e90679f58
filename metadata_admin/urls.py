"""Catalog pages for admins (the Django admin holds the editing forms)."""

from django.urls import path

from metadata_admin import views

app_name = "catalog"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("playground/", views.playground, name="playground"),
]
