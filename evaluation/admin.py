"""Evaluations in the Django admin: read-only records (they are produced by `manage.py evaluate`)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from evaluation.models import Evaluation, EvaluationItem


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Evaluation)
class EvaluationAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "source", "status", "version", "started_at", "accuracy", "rs10", "report")
    list_filter = ("status", "source", "version")
    search_fields = ("name", "questions_file", "version")
    exclude = ("report_html",)

    @admin.display(description="execution accuracy")
    def accuracy(self, obj):
        value = (obj.metrics or {}).get("execution_accuracy", {}).get("accuracy")
        return "—" if value is None else f"{value:.1%}"

    @admin.display(description="RS(10)")
    def rs10(self, obj):
        value = (obj.metrics or {}).get("rs", {}).get("10")
        return "—" if value is None else f"{value:.1f}"

    @admin.display(description="pages")
    def report(self, obj):
        return format_html(
            '<a href="{}">compare</a> · <a href="{}">report</a>',
            reverse("evaluation:detail", args=[obj.pk]),
            reverse("evaluation:report", args=[obj.pk]),
        )


@admin.register(EvaluationItem)
class EvaluationItemAdmin(ReadOnlyAdmin):
    list_display = ("item_id", "evaluation", "verdict", "outcome", "category", "latency_ms")
    list_filter = ("verdict", "outcome", "evaluation")
    search_fields = ("item_id", "question", "gold_sql", "predicted_sql")
    raw_id_fields = ("run",)
