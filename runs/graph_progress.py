"""Where a graph run is while it runs (issue 21: the graph in the run trace). Node progress
is never saved (graph.node.start / complete are live only) and the trace is written when the
run ends, but every superstep leaves a checkpoint naming the nodes it runs next: the nodes
of the checkpoints before the newest have run, and the newest one's are running now. So a
trace page opened mid-run starts from this and follows the socket from there."""

from __future__ import annotations

from runs import models as orm
from runs.core.records import RunRecord


def graph_progress(*, record: RunRecord) -> dict[str, list[str]] | None:
    """`{"done": [...], "running": [...]}` for a graph run still going, from its checkpoints;
    None once it has ended (its trace says more) or before its first checkpoint."""
    if record.finished:
        return None
    steps = list(
        orm.GraphCheckpoint.objects.filter(run_id=record.id).order_by("id").values_list("next_nodes", flat=True)
    )
    if not steps:
        return None
    running = [str(node) for node in steps[-1] or []]
    done: list[str] = []
    for nodes in steps[:-1]:
        for node in nodes or []:
            if str(node) not in done and str(node) not in running:
                done.append(str(node))
    return {"done": done, "running": running}


# A resume of a resume of ...: followed this far back at most.
MAX_RESUMES = 50


def earlier_node_states(*, record: RunRecord) -> dict[str, str]:
    """For a graph run that resumed a paused one (POST /api/runs/<id>/resume/, or a reply
    routed back to the graph): the node span statuses of the runs before it, oldest first,
    a later run's overwriting an earlier's. Found through the checkpoints: a resumed run's
    first checkpoint names the paused one it continues. Empty for a run that resumed none."""
    chain: list[str] = []
    run_id = record.id
    for _ in range(MAX_RESUMES):
        parent = (
            orm.GraphCheckpoint.objects.filter(run_id=run_id)
            .order_by("id")
            .values_list("parent_checkpoint_id", flat=True)
            .first()
        )
        earlier = (
            orm.GraphCheckpoint.objects.filter(checkpoint_id=parent).values_list("run_id", flat=True).first()
            if parent
            else None
        )
        if earlier is None or earlier == run_id or earlier in chain:
            break
        chain.append(str(earlier))
        run_id = str(earlier)
    states: dict[str, str] = {}
    traces = dict(orm.Run.objects.filter(pk__in=chain, session_id=record.session_id).values_list("id", "trace"))
    for earlier_id in reversed(chain):
        for span in (traces.get(earlier_id) or {}).get("spans") or []:
            if span.get("kind") == "node" and isinstance(span.get("name"), str):
                states[span["name"]] = str(span.get("status"))
    return states
