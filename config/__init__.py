"""askdb's project configuration: settings, URLs, the Celery app and the embedded runtime."""

import os

# Numerical libraries size their thread pools when they are first loaded, so this comes before
# anything imports them: the local models run on ASKDB_TORCH_THREADS cores (default 1) whatever
# the worker's concurrency; one short question gains nothing from more, and a busy machine loses.
_threads = os.environ.get("ASKDB_TORCH_THREADS", "1")
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, _threads)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no tokenizer thread pool forked half-alive
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models come from packages; never reach for a hub

from .celery import app as celery_app  # noqa: E402 - after the environment above

__all__ = ("celery_app",)
