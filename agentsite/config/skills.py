"""Skills, the code workspace's sandbox limits, and skill evolution."""

from __future__ import annotations

from agentsite.config.variable import Variable, declare

_SKILLS = "Skills and the code workspace"
_EVOLUTION = "Evolution"

# Skills and the sandboxed code workspace with its limits.
SKILLS: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_SKILLS_ROOTS",
        "strings",
        [],
        _SKILLS,
        "folders of skills (a SKILL.md per folder); the first root holding a name wins, database skills win over "
        "folders",
        shown="`agentsite/demo/skills`",
    ),
    declare(
        "AGENTSITE_SKILLS_PROFILE",
        "choice",
        "full",
        _SKILLS,
        "`full` (load skills and run their scripts in the sandbox) or `knowledge_only` (no execution tool)",
        choices=("full", "knowledge_only"),
    ),
    declare(
        "AGENTSITE_SKILLS_LOAD_MODE",
        "choice",
        "turn",
        _SKILLS,
        "how long a loaded skill stays in the prompt (docs/skills.md)",
        choices=("turn", "once", "session"),
    ),
    declare("AGENTSITE_SKILLS_MAX_LOADED", "integer", 0, _SKILLS, "skills loaded at once (0: no cap)", minimum=0),
    declare("AGENTSITE_SKILLS_REQUIRE_LOAD", "boolean", False, _SKILLS, "a skill's script runs only once it is loaded"),
    declare(
        "AGENTSITE_WORKSPACE_ROOT",
        "string",
        "",
        _SKILLS,
        "where code workspaces live (one per run); its parent must not hold `var/`, the artifacts or the media "
        "files (checked at start)",
        shown="`<temp dir>/agentsite/workspaces`",
    ),
    declare("AGENTSITE_WORKSPACE_TIMEOUT_S", "integer", 300, _SKILLS, "wall-clock limit of one sandboxed command"),
    declare("AGENTSITE_WORKSPACE_CPU_S", "integer", 60, _SKILLS, "CPU limit of one sandboxed command"),
    declare(
        "AGENTSITE_WORKSPACE_MEMORY_MB", "integer", 512, _SKILLS, "memory limit of one sandboxed command", minimum=64
    ),
    declare("AGENTSITE_WORKSPACE_FILE_SIZE_MB", "integer", 64, _SKILLS, "largest file a sandboxed command may write"),
    declare(
        "AGENTSITE_WORKSPACE_MAX_PROCESSES", "integer", 64, _SKILLS, "processes of one sandboxed command", minimum=4
    ),
    declare(
        "AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES",
        "integer",
        16 * 1024,
        _SKILLS,
        "output of a command kept for the model",
        minimum=256,
    ),
    declare(
        "AGENTSITE_WORKSPACE_MAX_ARTIFACTS",
        "integer",
        20,
        _SKILLS,
        "files of a workspace saved as artifacts per command",
        minimum=0,
    ),
    declare(
        "AGENTSITE_WORKSPACE_ALLOWED_COMMANDS",
        "strings",
        [],
        _SKILLS,
        "policy mode: only these programs may run",
        shown="none (no policy)",
    ),
    declare(
        "AGENTSITE_WORKSPACE_DENIED_COMMANDS",
        "strings",
        [],
        _SKILLS,
        "policy mode: these programs may not run",
        shown="none",
    ),
    declare(
        "AGENTSITE_WORKSPACE_UID_BASE",
        "integer",
        2_000_000_000,
        _SKILLS,
        "first uid (and gid) of the pool sandboxed commands run as, one per live workspace (uids no account, "
        "subordinate range or other deployment on the host uses)",
    ),
    declare(
        "AGENTSITE_WORKSPACE_UID_COUNT",
        "integer",
        4096,
        _SKILLS,
        "uids in the pool: the most workspaces alive at once; past it a new workspace is refused",
    ),
    declare("AGENTSITE_WORKSPACE_TTL_S", "integer", 24 * 3600, _SKILLS, "a workspace unused this long is swept"),
    declare(
        "AGENTSITE_WORKSPACE_MAX_BYTES",
        "integer",
        256 * 1024 * 1024,
        _SKILLS,
        "quota of one workspace (a size-limited tmpfs where the server may mount one, else checked)",
        minimum=1024 * 1024,
    ),
    declare(
        "AGENTSITE_WORKSPACE_MAX_FILES",
        "integer",
        10_000,
        _SKILLS,
        "files and folders one workspace may hold",
        minimum=16,
    ),
)

# Skill evolution: when a review is queued and the gates a candidate passes.
EVOLUTION: tuple[Variable, ...] = (
    declare(
        "AGENTSITE_EVOLUTION",
        "boolean",
        True,
        _EVOLUTION,
        "queue a skill review after each completed run",
        shown="on with the offline model, else off",
    ),
    declare(
        "AGENTSITE_EVOLUTION_MODEL",
        "string",
        "",
        _EVOLUTION,
        "the reviewer's model (`offline`: heuristic reviewer)",
        shown="`AGENTSITE_SUMMARY_MODEL`",
    ),
    declare(
        "AGENTSITE_EVOLUTION_MIN_TOOL_CALLS",
        "integer",
        4,
        _EVOLUTION,
        "evidence gate: tool calls (0: trigger off)",
        minimum=0,
    ),
    declare("AGENTSITE_EVOLUTION_ON_CORRECTION", "boolean", True, _EVOLUTION, "evidence gate: a user correction"),
    declare(
        "AGENTSITE_EVOLUTION_ON_RECOVERED_ERROR", "boolean", True, _EVOLUTION, "evidence gate: a recovered tool error"
    ),
    declare(
        "AGENTSITE_EVOLUTION_GATES",
        "strings",
        ["spec", "safety", "effectiveness", "human"],
        _EVOLUTION,
        "gates a candidate passes (`spec`, `safety`, `effectiveness`, `human`); `none`: publish directly",
    ),
    declare(
        "AGENTSITE_EVOLUTION_REPLAY",
        "choice",
        "auto",
        _EVOLUTION,
        "the Effectiveness gate's replay (docs/evolution.md)",
        choices=("auto", "scripted", "model", "off"),
    ),
    declare(
        "AGENTSITE_EVOLUTION_MAX_SKILL_CHARS", "integer", 16_000, _EVOLUTION, "the Spec gate's size limit", minimum=512
    ),
)
