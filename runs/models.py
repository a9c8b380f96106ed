"""Run records: one row per run, with its status, timings and counters."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        REQUIRES_ACTION = "requires_action"  # paused for the client's tool results (issue 20)
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"

    id = models.CharField(primary_key=True, max_length=64, verbose_name=_("ID"))
    app = models.CharField(max_length=64, verbose_name=_("app"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs", verbose_name=_("user")
    )
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="runs", verbose_name=_("session")
    )
    agent = models.CharField(max_length=128, verbose_name=_("agent"))
    request_id = models.CharField(
        max_length=64, help_text="the client's idempotency key: unique per user", verbose_name=_("request ID")
    )
    owner = models.CharField(
        max_length=128,
        blank=True,
        default="",
        help_text="host:pid:boot of the process running it",
        verbose_name=_("owner"),
    )
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True, verbose_name=_("status")
    )
    created_at = models.DateTimeField(verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    ended_at = models.DateTimeField(null=True, blank=True, verbose_name=_("ended at"))
    last_event_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last event at"))
    heartbeat_at = models.DateTimeField(null=True, blank=True, verbose_name=_("heartbeat at"))
    error = models.JSONField(null=True, blank=True, verbose_name=_("error"))
    answer = models.TextField(blank=True, default="", verbose_name=_("answer"))
    event_count = models.PositiveIntegerField(default=0, verbose_name=_("event count"))
    model_calls = models.PositiveIntegerField(default=0, verbose_name=_("model calls"))
    tool_calls = models.PositiveIntegerField(default=0, verbose_name=_("tool calls"))
    prompt_tokens = models.PositiveIntegerField(default=0, verbose_name=_("prompt tokens"))
    completion_tokens = models.PositiveIntegerField(default=0, verbose_name=_("completion tokens"))
    output = models.JSONField(
        null=True, blank=True, help_text="the validated structured answer (output schema)", verbose_name=_("output")
    )
    trace = models.JSONField(
        null=True,
        blank=True,
        help_text="the execution trace: model calls, tool calls, durations",
        verbose_name=_("trace"),
    )

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-created_at"]
        constraints = [
            # Client-chosen: two users may pick the same one without meeting.
            models.UniqueConstraint(fields=["user", "request_id"], name="runs_run_user_request_id_uniq"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.status})"

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


class A2ATask(models.Model):
    """An A2A task served at `/a2a/<agent>`: the protocol's own record, kept beside the run.

    `payload` is the task as the A2A SDK serialises it (protobuf JSON); `context_id` is the
    Agentsite session the task ran in.
    """

    id = models.CharField(primary_key=True, max_length=64, verbose_name=_("ID"))
    context_id = models.CharField(max_length=64, db_index=True, verbose_name=_("context ID"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="a2a_tasks", verbose_name=_("user")
    )
    agent = models.CharField(max_length=128, verbose_name=_("agent"))
    state = models.CharField(max_length=32, blank=True, default="", verbose_name=_("state"))
    payload = models.JSONField(default=dict, verbose_name=_("payload"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, db_index=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("A2A task")
        verbose_name_plural = _("A2A tasks")
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["user", "agent", "-updated_at"], name="runs_a2atask_user_agent_idx")]

    def __str__(self) -> str:
        return f"a2a task {self.id} ({self.state or 'new'})"


class GraphCheckpoint(models.Model):
    """A graph run's state after a superstep, or paused inside one (SPEC 10.3).

    `interrupt` is the pending question when the step paused; `resumed_by` the request id
    of the run that answered it (claimed by a conditional update: one answer per pause);
    `parent` the checkpoint this one continues, across runs when a run was resumed.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints", verbose_name=_("run"))
    checkpoint_id = models.CharField(max_length=64, unique=True, verbose_name=_("checkpoint ID"))
    graph = models.CharField(max_length=128, verbose_name=_("graph"))
    step = models.PositiveIntegerField(verbose_name=_("step"))
    state = models.JSONField(default=dict, verbose_name=_("state"))
    next_nodes = models.JSONField(default=list, verbose_name=_("next nodes"))
    barriers = models.JSONField(default=dict, verbose_name=_("barriers"))
    writes = models.JSONField(
        default=dict, help_text="updates of the tasks that finished before a pause", verbose_name=_("writes")
    )
    resume_values = models.JSONField(default=dict, verbose_name=_("resume values"))
    interrupt = models.JSONField(
        null=True, blank=True, help_text="the pending interrupt: id, node, payload, index", verbose_name=_("interrupt")
    )
    parent_checkpoint_id = models.CharField(
        max_length=64, blank=True, default="", verbose_name=_("parent checkpoint ID")
    )
    resumed_by = models.CharField(max_length=64, blank=True, default="", verbose_name=_("resumed by"))
    created_at = models.DateTimeField(verbose_name=_("created at"))

    class Meta:
        verbose_name = _("graph checkpoint")
        verbose_name_plural = _("graph checkpoints")
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "-id"], name="runs_graphcp_run_latest_idx")]

    def __str__(self) -> str:
        waiting = " waiting" if self.interrupt and not self.resumed_by else ""
        return f"checkpoint {self.graph} step {self.step} of run {self.run_id}{waiting}"


class RemoteAgent(models.Model):
    """An A2A agent served elsewhere, added from the admin without code (issue 25, item 8).

    Its card is fetched and checked when the row is saved and kept here, so runs never wait
    on it. `token` is the credential the remote expects: written from the admin, never
    shown back, never logged (`runs/remote_agents.py`). Served as an agent of its own name
    when `as_agent`; offered as the tool `ask_<name>` to the registered agents `tool_of`
    lists.
    """

    name = models.CharField(
        max_length=64,
        unique=True,
        help_text="the agent's name here: 1-64 letters, digits, '_' or '-'",
        verbose_name=_("name"),
    )
    url = models.URLField(
        max_length=500,
        help_text="the remote agent's A2A URL; its card is read from <url>/.well-known/agent-card.json",
        verbose_name=_("URL"),
    )
    description = models.TextField(
        blank=True, default="", help_text="blank: the card's description", verbose_name=_("description")
    )
    token = models.TextField(
        blank=True,
        default="",
        help_text="sent as `Authorization: Bearer <token>` or in `header_name`",
        verbose_name=_("token"),
    )
    header_name = models.CharField(
        max_length=100, blank=True, default="", help_text="blank: Authorization: Bearer", verbose_name=_("header name")
    )
    as_agent = models.BooleanField(
        default=True, help_text="listed in /api/agents/ and runnable on every surface", verbose_name=_("as agent")
    )
    tool_of = models.JSONField(
        default=list, blank=True, help_text="registered agents that get the tool ask_<name>", verbose_name=_("tool of")
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    card = models.JSONField(
        default=dict, blank=True, help_text="the agent card as fetched and checked on save", verbose_name=_("card")
    )
    card_fetched_at = models.DateTimeField(null=True, blank=True, verbose_name=_("card fetched at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("remote agent")
        verbose_name_plural = _("remote agents")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        # Never the token: a repr ends up in logs and tracebacks.
        return f"<RemoteAgent {self.name!r} {self.url!r}>"
