"""Django admin for phenotypes. Changes to a source's notes policy go through the service (audited)."""

from django.contrib import admin

from phenotypes.models import NotesPolicy, Phenotype, PhenotypeRun
from phenotypes.services import notes_policy_set


@admin.register(Phenotype)
class PhenotypeAdmin(admin.ModelAdmin):
    list_display = ("name", "updated_at")
    readonly_fields = ("name", "description", "terms", "icd", "updated_at", "updated_by")

    def has_add_permission(self, request) -> bool:
        return False  # defined on the Phenotypes page or with `manage.py phenotype define` (audited)


@admin.register(NotesPolicy)
class NotesPolicyAdmin(admin.ModelAdmin):
    list_display = ("source", "snippets_to_llm")

    def save_model(self, request, obj, form, change) -> None:
        notes_policy_set(source=obj.source, snippets_to_llm=obj.snippets_to_llm, actor=request.user)


@admin.register(PhenotypeRun)
class PhenotypeRunAdmin(admin.ModelAdmin):
    list_display = ("pk", "phenotype", "source", "judge", "status", "created_at")
    list_filter = ("status", "judge")
    readonly_fields = [f.name for f in PhenotypeRun._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
