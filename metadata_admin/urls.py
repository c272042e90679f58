"""Catalog pages for admins (the Django admin holds the editing forms)."""

from django.urls import path

app_name = "catalog"
urlpatterns: list = []
