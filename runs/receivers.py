"""What the run layer does when a session is deleted or a credential revoked.

Deleting a session stops its runs first (cancel, then delete: nothing writes to a session
that is going), then closes the sockets that follow it. Revoking an API token closes the
sockets it opened; deactivating or deleting a user closes all of theirs. Both go out on the
channel layer after the change commits, so they reach every process; the sockets also
re-check their credential on every client frame (`runs/surfaces/websocket/consumers.py`), which covers a
change made without signals (a queryset `update`).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from rest_framework.authtoken.models import Token

from runs.fanout import REVOKED_MESSAGE, SESSION_DELETED_MESSAGE, session_group, token_digest, user_group
from runs.models import RemoteAgent
from runs.remote_agents import remote_agents_changed
from runs.services import session_runs_stop
from sessions_app.signals import session_deleted, session_deleting

logger = logging.getLogger(__name__)


def _tell(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception as exc:  # the layer is down: the sockets' own checks still hold
        logger.warning("could not tell group %s of %s: %s: %s", group, message["type"], type(exc).__name__, exc)


def _tell_on_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: _tell(group, message))


@receiver(session_deleting, dispatch_uid="runs.stop_session_runs")
def stop_session_runs(sender: Any, *, session: Any, **kwargs: Any) -> None:
    stopped = session_runs_stop(session_id=session.id)
    if stopped:
        logger.info("session %s is being deleted: stopped its runs %s", session.id, stopped)


@receiver(session_deleted, dispatch_uid="runs.close_session_sockets")
def close_session_sockets(sender: Any, *, session_id: str, **kwargs: Any) -> None:
    _tell_on_commit(session_group(session_id), {"type": SESSION_DELETED_MESSAGE})


@receiver(post_delete, sender=Token, dispatch_uid="runs.close_token_sockets")
def close_token_sockets(sender: Any, *, instance: Token, **kwargs: Any) -> None:
    _tell_on_commit(user_group(instance.user_id), {"type": REVOKED_MESSAGE, "token": token_digest(instance.key)})


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="runs.close_inactive_user_sockets")
def close_inactive_user_sockets(sender: Any, *, instance: Any, **kwargs: Any) -> None:
    if not instance.is_active:
        _tell_on_commit(user_group(instance.pk), {"type": REVOKED_MESSAGE})


@receiver(post_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="runs.close_deleted_user_sockets")
def close_deleted_user_sockets(sender: Any, *, instance: Any, **kwargs: Any) -> None:
    _tell_on_commit(user_group(instance.pk), {"type": REVOKED_MESSAGE})


@receiver(post_save, sender=RemoteAgent, dispatch_uid="runs.remote_agent_saved")
@receiver(post_delete, sender=RemoteAgent, dispatch_uid="runs.remote_agent_deleted")
def remote_agent_changed(sender: Any, **kwargs: Any) -> None:
    # This process's Runner serves the change at once; the others within seconds
    # (runs/remote_agents.py follows the table).
    transaction.on_commit(remote_agents_changed)
