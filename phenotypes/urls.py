"""Pages of phenotypes, under /phenotypes/."""

from django.urls import path

from phenotypes import views

app_name = "phenotypes"
urlpatterns = [
    path("", views.phenotype_list, name="list"),
    path("runs/", views.phenotype_run_start, name="run_start"),
    path("runs/<int:run_id>/", views.phenotype_run, name="run"),
    path("runs/<int:run_id>/adjudicate/<int:decision_id>/", views.phenotype_adjudicate, name="adjudicate"),
    path("runs/<int:run_id>/cohort/", views.phenotype_cohort, name="cohort"),
    path("sources/<int:source_id>/notes-policy/", views.notes_policy, name="notes_policy"),
]
