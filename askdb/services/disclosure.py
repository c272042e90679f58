"""Disclosure control for a user on a source: the source's mode as a policy for the pipeline, and
the ledger of released answers that the differencing audit and the privacy budget read."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from askdb.models import Release
from core import disclosure
from infra.audit.services import audit_record

# How many of a user's recent releases the differencing audit compares with (newest first).
LEDGER_SCAN = 2000


def _secret(user) -> bytes:
    """The noise key of one user: derived from the server's secret, so that it is no other use's key."""
    key = hmac.new(settings.SECRET_KEY.encode(), b"askdb.disclosure", hashlib.sha256).digest()
    return hmac.new(key, str(user.pk if user is not None else "").encode(), hashlib.sha256).digest()


def disclosure_policy(*, source, user=None, evaluation: bool = False) -> disclosure.DisclosurePolicy:
    """How `source` releases counts to `user`. An evaluation run measures askdb's SQL against gold
    answers for admins, so it keeps plain suppression (noise would measure the noise)."""
    mode = disclosure.SUPPRESS if evaluation else source.disclosure_mode
    return disclosure.DisclosurePolicy(
        mode=mode,
        min_cell_size=source.min_cell_size if mode in disclosure.PERTURBING else 0,
        round_base=source.round_base,
        noise=source.noise_kind,
        noise_scale=source.noise_scale,
        noise_clip=source.noise_clip,
        epsilon=source.dp_epsilon,
        contributions=source.dp_contributions,
        budget=source.dp_budget,
        differencing_limit=0 if evaluation else source.differencing_limit,
        differencing_window_days=source.differencing_window_days,
    )


def disclosure_key(*, user) -> bytes:
    """The key of this user's noise: disclosure.noise_seed(key, "", sql) seeds one query."""
    return _secret(user)


class DatabaseLedger:
    """disclosure.Ledger on the Release table, for one user on one source (one run, if any)."""

    def __init__(self, *, source, user, run=None):
        self.source, self.user, self.run = source, user, run
        self._near = 0

    def _mine(self):
        return Release.objects.filter(source=self.source, user=self.user)

    def near_identical_count(self, shape: disclosure.QueryShape, *, window_days: int) -> int:
        since = timezone.now() - dt.timedelta(days=window_days)
        shapes = self._mine().filter(created_at__gte=since).order_by("-pk").values_list("shape", flat=True)
        self._near = sum(
            1 for data in shapes[:LEDGER_SCAN]
            if data and disclosure.near_identical(disclosure.QueryShape.from_json(data), shape)
        )  # fmt: skip
        return self._near

    def budget_spent(self) -> float:
        return float(self._mine().aggregate(total=Sum("epsilon"))["total"] or 0.0)

    def record(self, *, sql: str, shape: disclosure.QueryShape | None, epsilon: float, mode: str) -> None:
        """One more released answer; a probe one condition from earlier answers is also audited."""
        with transaction.atomic():
            self._record(sql=sql, shape=shape, epsilon=epsilon, mode=mode)

    def _record(self, *, sql: str, shape: disclosure.QueryShape | None, epsilon: float, mode: str) -> None:
        release = Release.objects.create(
            user=self.user, source=self.source, run=self.run, mode=mode, epsilon=epsilon,
            sql_sha256=hashlib.sha256(sql.encode()).hexdigest(),
            shape=shape.to_json() if shape is not None else {}, near_identical=self._near,
        )  # fmt: skip
        if self._near:
            audit_record(
                action="privacy.near_identical", actor=self.user, target=self.run or self.source,
                message=f"{self._near} earlier answer(s) one condition from this query",
                detail={"release": release.pk, "near_identical": self._near, "mode": mode, "sql": sql[:4000]},
            )  # fmt: skip
