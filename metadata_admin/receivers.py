"""The catalog's own listeners: a change of its documentation re-grants the clinical readers, since
the catalog's sensitive flags decide which columns the restricted tier's reader may read."""

from __future__ import annotations

import logging

import psycopg
from django.dispatch import receiver

from metadata_admin.services import source_reader_grants
from metadata_admin.signals import catalog_changed

log = logging.getLogger(__name__)


@receiver(catalog_changed)
def _regrant_readers(sender, source, **kwargs) -> None:
    try:
        source_reader_grants(source)
    except psycopg.Error as exc:  # the edit stands; the next load or change grants again
        log.warning("could not re-grant the clinical readers of %s: %s", source, exc)
