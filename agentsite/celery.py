"""The Celery app. Eager (in-process) unless `REDIS_URL` names a broker.

A worker keeps its database connection between tasks, as the web process's threads do
(`agentsite.threads.KeptConnections`): Celery's Django fixup would close it before and
after every task (`CONN_MAX_AGE` is 0), so each job opened a new connection and PostgreSQL
started a backend for it (issue 23). `CELERY_DB_REUSE_MAX` (settings) has the fixup close
it only every so many tasks; before each task a connection that may be dead is checked.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

app = Celery("agentsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# agentsite.threads is imported when a task runs: this module is imported with the package,
# before settings are loaded, and that one starts the database pools.


@task_prerun.connect
def _check_kept_connections(**_: Any) -> None:
    from agentsite.threads import TASK_CONNECTIONS

    TASK_CONNECTIONS.before_task()


@task_postrun.connect
def _task_ended(**_: Any) -> None:
    from agentsite.threads import TASK_CONNECTIONS

    TASK_CONNECTIONS.after_task()
