"""Catalog pages for admins: overview, per-table curation, retrieval playground."""

from django.urls import path

from metadata_admin import views

app_name = "catalog"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("tables/<int:doc_id>/", views.table_doc_edit, name="table"),
    path("playground/", views.playground, name="playground"),
]
