"""Run records: one row per run, with its status, timings and counters."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        REQUIRES_ACTION = "requires_action"  # paused for the client's tool results (issue 20)
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"

    id = models.CharField(primary_key=True, max_length=64)
    app = models.CharField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    session = models.ForeignKey("sessions_app.Session", on_delete=models.CASCADE, related_name="runs")
    agent = models.CharField(max_length=128)
    request_id = models.CharField(max_length=64, help_text="the client's idempotency key: unique per user")
    owner = models.CharField(max_length=128, blank=True, default="", help_text="host:pid:boot of the process running it")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    answer = models.TextField(blank=True, default="")
    event_count = models.PositiveIntegerField(default=0)
    model_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    output = models.JSONField(null=True, blank=True, help_text="the validated structured answer (output schema)")
    trace = models.JSONField(null=True, blank=True, help_text="the execution trace: model calls, tool calls, durations")

    class Meta:
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

    id = models.CharField(primary_key=True, max_length=64)
    context_id = models.CharField(max_length=64, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="a2a_tasks")
    agent = models.CharField(max_length=128)
    state = models.CharField(max_length=32, blank=True, default="")
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
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

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    checkpoint_id = models.CharField(max_length=64, unique=True)
    graph = models.CharField(max_length=128)
    step = models.PositiveIntegerField()
    state = models.JSONField(default=dict)
    next_nodes = models.JSONField(default=list)
    barriers = models.JSONField(default=dict)
    writes = models.JSONField(default=dict, help_text="updates of the tasks that finished before a pause")
    resume_values = models.JSONField(default=dict)
    interrupt = models.JSONField(null=True, blank=True, help_text="the pending interrupt: id, node, payload, index")
    parent_checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    resumed_by = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
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

    name = models.CharField(max_length=64, unique=True, help_text="the agent's name here: 1-64 letters, digits, '_' or '-'")
    url = models.URLField(max_length=500, help_text="the remote agent's A2A URL; its card is read from <url>/.well-known/agent-card.json")
    description = models.TextField(blank=True, default="", help_text="blank: the card's description")
    token = models.TextField(blank=True, default="", help_text="sent as `Authorization: Bearer <token>` or in `header_name`")
    header_name = models.CharField(max_length=100, blank=True, default="", help_text="blank: Authorization: Bearer")
    as_agent = models.BooleanField(default=True, help_text="listed in /api/agents/ and runnable on every surface")
    tool_of = models.JSONField(default=list, blank=True, help_text="registered agents that get the tool ask_<name>")
    enabled = models.BooleanField(default=True)
    card = models.JSONField(default=dict, blank=True, help_text="the agent card as fetched and checked on save")
    card_fetched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        # Never the token: a repr ends up in logs and tracebacks.
        return f"<RemoteAgent {self.name!r} {self.url!r}>"
