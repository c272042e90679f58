"""The example library's pages (askdb/views_library.py), under /library/."""

from django.urls import path

from askdb import views_library

app_name = "library"
urlpatterns = [
    path("", views_library.example_list, name="list"),
    path("<int:example_id>/", views_library.example_detail, name="detail"),
    path("<int:example_id>/retire/", views_library.example_retire, name="retire"),
    path("<int:example_id>/restore/", views_library.example_restore, name="restore"),
    path("import/", views_library.examples_import_view, name="import"),
    path("import/jobs/<int:job_id>/", views_library.examples_import_job_view, name="import_job"),
    path("export/", views_library.examples_export_view, name="export"),
    path("revalidate/", views_library.examples_revalidate_view, name="revalidate"),
    path("answerability/train/", views_library.answerability_train_view, name="train_answerability"),
    path("answerability/train/<str:task_id>/", views_library.answerability_training_view, name="training"),
]
