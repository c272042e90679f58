from django.urls import path

from evaluation import views

app_name = "evaluation"
urlpatterns = [
    path("", views.evaluation_list, name="list"),
    path("<int:evaluation_id>/", views.evaluation_detail, name="detail"),
    path("<int:evaluation_id>/report.html", views.evaluation_report, name="report"),
]
