"""The three roles as Django groups, and the permissions each one carries.

Roles are groups so that an admin can see and change them in the Django admin; this module
is the single place that says what each role may do, re-applied after every migrate.
"""

from __future__ import annotations

AGGREGATE_RESEARCHER = "aggregate_researcher"
RESEARCHER = "researcher"
REVIEWER = "reviewer"
ADMIN = "admin"
ROLES = (AGGREGATE_RESEARCHER, RESEARCHER, REVIEWER, ADMIN)

# Who may browse the example library (read-only), on the pages and in the API alike: everyone who
# asks, since without an LLM the library is what askdb can answer. Changing it is for reviewers.
LIBRARY_BROWSE_PERMS = ("askdb.ask_questions", "askdb.review_runs", "askdb.curate_catalog")

# "app_label.codename"; a codename ending in "*" means every permission of that app.
# Row-level results (view_row_level) are for researchers and up: an aggregate-only researcher gets
# counts and statistics over groups only. Sensitive columns (view_sensitive) are for reviewers and
# admins, who must read them to check SQL. A deployment that wants researchers aggregate-only puts
# them in the aggregate_researcher group (see README "Privacy"). A timed-out question may be run
# again as a long query (run_long_queries, a worker busy for minutes) by researchers and up; an
# aggregate-only researcher asks an admin, who can grant it to that group.
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    AGGREGATE_RESEARCHER: ("askdb.ask_questions",),
    RESEARCHER: ("askdb.ask_questions", "askdb.view_row_level", "askdb.run_long_queries"),
    REVIEWER: (
        "askdb.ask_questions",
        "askdb.view_row_level",
        "askdb.view_sensitive",
        "askdb.review_runs",
        "askdb.view_all_runs",
        "askdb.run_long_queries",
    ),
    ADMIN: (
        "askdb.ask_questions",
        "askdb.view_row_level",
        "askdb.view_sensitive",
        "askdb.review_runs",
        "askdb.view_all_runs",
        "askdb.run_long_queries",
        "askdb.view_audit",
        "askdb.curate_catalog",
        "askdb.manage_users",
        "metadata_admin.*",
        "evaluation.view_evaluation",
        "evaluation.view_evaluationitem",
        "auth.view_user",
        "auth.add_user",
        "auth.change_user",
        "auth.view_group",
        "authtoken.*",
    ),
}


def roles_sync() -> None:
    """Create the role groups and give each exactly its permissions (idempotent)."""
    from django.contrib.auth.models import Group, Permission

    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for perm in perms:
            app_label, codename = perm.split(".", 1)
            qs = Permission.objects.filter(content_type__app_label=app_label)
            if codename != "*":
                qs = qs.filter(codename=codename)
            wanted.extend(qs)
        group.permissions.set(wanted)


def roles_sync_after_migrate(sender, **kwargs) -> None:
    roles_sync()


def user_role(user) -> str | None:
    """The highest role a user holds, for navigation and display."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for role in (ADMIN, REVIEWER, RESEARCHER, AGGREGATE_RESEARCHER):
        if role in names:
            return role
    return None
