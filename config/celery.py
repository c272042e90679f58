"""The Celery app. Broker and limits come from Django settings (CELERY_* names)."""

import logging
import os

from celery import Celery, bootsteps

from config import broker

broker.install()  # a worker survives a restart of Redis (see config/broker.py)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("askdb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class RunReaper(bootsteps.StartStopStep):
    """Every ASKDB_REAP_INTERVAL_SECONDS, in the worker's main process: fail runs whose worker
    died, send runs the broker never got (it was down at submit), fail runs queued too long.
    Without it only someone opening a run's page would reap, and an unattended queue never heals."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.tref = None

    def start(self, worker):
        from django.conf import settings

        interval = settings.ASKDB_REAP_INTERVAL_SECONDS
        if interval > 0:
            worker.timer.call_after(1, reap_runs)
            self.tref = worker.timer.call_repeatedly(interval, reap_runs)

    def stop(self, worker):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None


def reap_runs() -> None:
    from django.db import connections

    from askdb.services.runs import runs_reap

    try:
        reaped = runs_reap()
        if any(reaped.values()):
            logging.getLogger("askdb.reaper").info("reaped runs: %s", reaped)
    except Exception:  # a reap that fails (database down) is tried again at the next tick
        logging.getLogger("askdb.reaper").warning("reaping runs failed", exc_info=True)
    finally:
        connections.close_all()  # the main process forks pool processes: hold no connection open


app.steps["worker"].add(RunReaper)
