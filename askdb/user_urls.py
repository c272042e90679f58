"""The users page for admins (askdb/views_users.py), under /users/."""

from django.urls import path

from askdb import views_users

app_name = "users"
urlpatterns = [
    path("", views_users.users_page, name="list"),
    path("new/", views_users.user_create, name="create"),
    path("<int:user_id>/", views_users.user_change, name="change"),
]
