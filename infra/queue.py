"""Sending a task to the workers by its registered name.

A service enqueues its task, and the task (in the app's tasks.py) calls the service: if the service
imported the task module, the two would import each other. So services name the task instead
("askdb.run_question"); tests/test_layers.py checks every name sent here is a registered task.
"""

from __future__ import annotations

from celery import current_app


def task_send(name: str, *args, task_id: str | None = None) -> None:
    """Send task `name` with `args` to the broker (as `.apply_async`); raises what the broker
    client raises when the broker is unreachable.

    No result is kept or waited for (`ignore_result`): what a task did is in the app database,
    and subscribing to a result would touch the result store even when only the broker is asked."""
    current_app.send_task(name, args=args, task_id=task_id, ignore_result=True)
