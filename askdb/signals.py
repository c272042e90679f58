"""Authentication, user and role changes go to the audit log, whichever screen or shell made them;
a catalog change re-validates the example library (the catalog sends it, askdb listens), and
embedded docs embed the gate's column docs."""

import logging

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from askdb.models import Example
from askdb.services.examples import examples_revalidate_later, library_generation_bump
from infra.audit.models import AuditEvent
from infra.audit.services import audit_record
from metadata_admin.signals import catalog_changed, docs_embedded, source_data_changed

log = logging.getLogger(__name__)


@receiver(catalog_changed)
def _catalog_changed(sender, source, **kwargs):
    library_generation_bump(source_id=source.pk, data=True)
    examples_revalidate_later(source)


@receiver(docs_embedded)
def _docs_embedded(sender, source, **kwargs):
    """The gate's column docs are embedded with the docs, so no question computes or writes them."""
    from askdb.answerability.scorer import column_doc_vectors_compute

    try:
        column_doc_vectors_compute(source)
    except Exception:  # the docs stay embedded; the next embedding or worker start tries again
        log.warning("the gate's column doc vectors of %s not computed", source, exc_info=True)


@receiver(source_data_changed)
def _source_data_changed(sender, source, **kwargs):
    """Reloaded data: every worker process reloads the source's values before its next question."""
    library_generation_bump(source_id=source.pk, data=True)


@receiver(post_save, sender=Example)
@receiver(post_delete, sender=Example)
def _example_changed(sender, instance, **kwargs):
    """Added, edited, flagged, retired or restored: every process rebuilds its library index before
    its next question (a flagged example stops answering at once, in every worker)."""
    library_generation_bump(source_id=instance.source_id, examples=True)


def _ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None


@receiver(user_logged_in)
def _logged_in(sender, request, user, **kwargs):
    audit_record(action="auth.login", actor=user, target=user, ip=_ip(request))


@receiver(user_logged_out)
def _logged_out(sender, request, user, **kwargs):
    if user is not None:
        audit_record(action="auth.logout", actor=user, target=user, ip=_ip(request))


@receiver(user_login_failed)
def _login_failed(sender, credentials, request=None, **kwargs):
    audit_record(
        action="auth.login_failed",
        message=f"failed login for {credentials.get('username', '')!r}",
        ip=_ip(request),
    )


@receiver(user_locked_out)
def _locked_out(sender, request=None, username=None, ip_address=None, **kwargs):
    """One event per lockout: axes signals again at every attempt while locked (each of those is
    audited as a failed login already)."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    if AuditEvent.objects.filter(
        action="auth.locked_out", ip=ip_address, detail__username=username or "", at__gte=since
    ).exists():
        return
    audit_record(
        action="auth.locked_out",
        message=f"sign-in locked for {username or ''!r} from {ip_address or 'an unknown address'}",
        detail={"username": username or "", "failure_limit": settings.AXES_FAILURE_LIMIT},
        ip=ip_address or _ip(request),
    )


_WATCHED = ("is_active", "is_staff", "is_superuser", "password", "email")


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def _user_before(sender, instance, **kwargs):
    old = sender.objects.filter(pk=instance.pk).values(*_WATCHED).first() if instance.pk else None
    instance._askdb_before = old


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def _user_saved(sender, instance, created, **kwargs):
    if created:
        audit_record(action="user.created", target=instance, message=instance.username)
        return
    old = getattr(instance, "_askdb_before", None) or {}
    changed = [f for f in _WATCHED if f in old and old[f] != getattr(instance, f)]
    if changed:  # last_login and the like are not worth an event; these are
        detail = {f: getattr(instance, f) for f in changed if f != "password"}
        audit_record(action="user.changed", target=instance, message=f"{instance.username}: {', '.join(changed)}",
                     detail=detail)  # fmt: skip


def _groups_changed(sender, instance, action, pk_set, model, **kwargs):
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if isinstance(instance, Group):  # changed from the group's side
        users = list(model.objects.filter(pk__in=pk_set or [])) if pk_set else []
        groups = [instance]
    else:
        users, groups = [instance], list(Group.objects.filter(pk__in=pk_set or []))
    for user in users:
        audit_record(
            action="user.roles_changed", target=user,
            message=f"{user.username}: {action.removeprefix('post_')} {', '.join(g.name for g in groups) or 'all roles'}",
            detail={"roles": list(user.groups.values_list("name", flat=True))},
        )  # fmt: skip


def connect_group_signals() -> None:
    m2m_changed.connect(_groups_changed, sender=get_user_model().groups.through, dispatch_uid="askdb-roles")
