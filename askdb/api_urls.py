"""REST API routes (see askdb/apis.py)."""

app_name = "api"
urlpatterns: list = []
