from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    """Measuring how well askdb answers: benchmark runs, EHRSQL metrics, reports, comparisons."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "evaluation"
