"""REST API routes (see askdb/apis.py). A run is a Run everywhere: /runs/<id>/ on the pages, /api/runs/<id>/ here."""

from django.urls import path, re_path

from askdb import apis, apis_requests

app_name = "api"
urlpatterns = [
    path("token/", apis.TokenObtainApi.as_view(), name="token"),
    path("runs/", apis.RunListApi.as_view(), name="run_list"),
    path("runs/<int:run_id>/", apis.RunDetailApi.as_view(), name="run_detail"),
    path("runs/<int:run_id>/result.csv", apis.RunResultCsvApi.as_view(), name="run_result_csv"),
    path("runs/<int:run_id>/cancel/", apis.RunCancelApi.as_view(), name="run_cancel"),
    path("runs/<int:run_id>/retry/", apis.RunRetryApi.as_view(), name="run_retry"),
    path("runs/<int:run_id>/long-query/", apis.RunLongQueryApi.as_view(), name="run_long_query"),
    path("runs/<int:run_id>/review/", apis.RunReviewApi.as_view(), name="run_review"),
    path("runs/<int:run_id>/request/", apis_requests.RunRequestApi.as_view(), name="run_request"),
    path("requests/", apis_requests.RequestQueueApi.as_view(), name="request_queue"),
    path("requests/<int:request_id>/", apis_requests.RequestDetailApi.as_view(), name="request_detail"),
    path(
        "requests/<int:request_id>/preview/",
        apis_requests.RequestPreviewApi.as_view(),
        name="request_preview",
    ),
    path(
        "requests/<int:request_id>/answer/", apis_requests.RequestAnswerApi.as_view(), name="request_answer"
    ),
    path("inbox/", apis_requests.InboxApi.as_view(), name="inbox"),
    path("reviews/", apis.ReviewQueueApi.as_view(), name="review_queue"),
    path("examples/", apis.ExampleListApi.as_view(), name="example_list"),
    path("examples/import/", apis.ExampleImportApi.as_view(), name="example_import"),
    path("examples/imports/<int:job_id>/", apis.ExampleImportJobApi.as_view(), name="example_import_job"),
    path("examples/<int:example_id>/", apis.ExampleDetailApi.as_view(), name="example_detail"),
    path("examples/<int:example_id>/retire/", apis.ExampleRetireApi.as_view(), name="example_retire"),
    path("examples/<int:example_id>/restore/", apis.ExampleRestoreApi.as_view(), name="example_restore"),
    # Last: anything else under /api/ (a non-integer id, a typo) is the API's JSON 404. The schema
    # and docs routes come after this include in config/urls.py, so they are left to match there.
    re_path(r"^(?!schema/$|docs/$).*$", apis.ApiNotFound.as_view(), name="not_found"),
]
