"""Authentication events go to the audit log."""

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from askdb.services import audit_record


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
