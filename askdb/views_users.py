"""The users page for admins: create (invite) an account, change a role, deactivate or restore.
Thin: permission, service, render; every change is audited by askdb/services/users.py."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from askdb.roles import ROLES
from askdb.selectors_users import user_list
from askdb.services.users import UserChangeError, user_active_set, user_invite, user_role_set

ROLE_LABELS = {
    "aggregate_researcher": "Aggregate researcher (counts only)",
    "researcher": "Researcher",
    "reviewer": "Reviewer",
    "admin": "Admin",
}


def _ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR")


@require_GET
@permission_required("askdb.manage_users", raise_exception=True)
def users_page(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:150]
    return render(request, "askdb/users.html", {
        "rows": user_list(query=query), "q": query,
        "roles": [(r, ROLE_LABELS.get(r, r)) for r in ROLES],
    })  # fmt: skip


@require_POST
@permission_required("askdb.manage_users", raise_exception=True)
def user_create(request: HttpRequest) -> HttpResponse:
    try:
        user, password = user_invite(
            actor=request.user, username=request.POST.get("username", ""),
            email=request.POST.get("email", ""), role=request.POST.get("role", ""), ip=_ip(request),
        )  # fmt: skip
    except UserChangeError as exc:
        messages.error(request, str(exc))
    else:
        # Shown once: it is not stored in clear anywhere. The person changes it under "Password".
        messages.success(
            request,
            f"{user.username} can sign in with the one-time password {password} — hand it over "
            "privately; they should change it under “Password” at once.",
        )
    return redirect("users:list")


@require_POST
@permission_required("askdb.manage_users", raise_exception=True)
def user_change(request: HttpRequest, user_id: int) -> HttpResponse:
    """One form per row: a new role, or deactivate / reactivate."""
    user = get_object_or_404(get_user_model(), pk=user_id)
    action = request.POST.get("action", "")
    try:
        if action == "role":
            user_role_set(actor=request.user, user=user, role=request.POST.get("role", ""), ip=_ip(request))
            messages.success(request, f"{user.username} is now {ROLE_LABELS.get(request.POST['role'], '')}.")
        elif action in ("deactivate", "reactivate"):
            user_active_set(actor=request.user, user=user, active=action == "reactivate", ip=_ip(request))
            messages.success(request, f"{user.username} {action}d.")
        else:
            messages.error(request, "Nothing changed: unknown action.")
    except UserChangeError as exc:
        messages.error(request, str(exc))
    return redirect("users:list")
