"""REST routes of phenotypes, under /api/phenotypes/."""

from django.urls import path

from phenotypes import apis

app_name = "phenotypes_api"
urlpatterns = [
    path("", apis.PhenotypeListApi.as_view(), name="list"),
    path("runs/", apis.PhenotypeRunApi.as_view(), name="run"),
    path("runs/<int:run_id>/", apis.PhenotypeRunDetailApi.as_view(), name="run_detail"),
    path("runs/<int:run_id>/cohort/", apis.PhenotypeCohortApi.as_view(), name="cohort"),
]
