"""The recall benchmark's cases (`bench/recall.py`): LoCoMo conversations and QMSum meetings as
turns and questions with their evidence, and recall of the evidence."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_DATA = ROOT.parent / "shared" / "data"
APP = "bench"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


# -- data ---------------------------------------------------------------------------------------


@dataclass
class Turn:
    key: str  # dia_id (LoCoMo) or turn index (QMSum)
    speaker: str
    text: str
    role: str


@dataclass
class Question:
    text: str
    evidence: list[set[str]]  # groups of turn keys; a group is found when any key is
    category: str


@dataclass
class Case:
    name: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)


def load_locomo(path: Path) -> tuple[list[Case], int]:
    """LoCoMo conversations and their category 1-4 questions; also how many evidence ids
    name no turn (malformed in the data) and were dropped."""
    cases = []
    dropped = 0
    for conv in json.loads(path.read_text()):
        c = conv["conversation"]
        turns = []
        k = 1
        while f"session_{k}" in c:
            for t in c[f"session_{k}"]:
                text = t["text"]
                if t.get("blip_caption"):
                    text += f" [image: {t['blip_caption']}]"
                role = "user" if t["speaker"] == c["speaker_a"] else "assistant"
                turns.append(Turn(key=t["dia_id"], speaker=t["speaker"], text=text, role=role))
            k += 1
        known = {t.key for t in turns}
        case = Case(name=conv["sample_id"], turns=turns)
        for qa in conv["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            ids = set()
            for raw in qa.get("evidence", []):
                for a, b in re.findall(r"D:?(\d+):(\d+)", raw):
                    ids.add(f"D{a}:{b}")
            valid = ids & known
            dropped += len(ids - known)
            if valid:
                case.questions.append(
                    Question(
                        text=qa["question"],
                        evidence=[{e} for e in sorted(valid)],
                        category=CATEGORIES[qa["category"]],
                    )
                )
        cases.append(case)
    return cases, dropped


def load_qmsum(folder: Path) -> list[Case]:
    cases = []
    for path in sorted(folder.glob("*.json")):
        meeting = json.loads(path.read_text())
        turns = [
            Turn(key=str(i), speaker=t["speaker"], text=t["content"], role="user" if i % 2 == 0 else "assistant")
            for i, t in enumerate(meeting["meeting_transcripts"])
        ]
        case = Case(name=path.stem, turns=turns)
        for q in meeting.get("specific_query_list", []):
            spans = [{str(i) for i in range(int(a), int(b) + 1)} for a, b in q.get("relevant_text_span", [])]
            if spans:
                case.questions.append(Question(text=q["query"], evidence=spans, category="specific"))
        cases.append(case)
    return cases


def recall(evidence: list[set[str]], found: Sequence[str]) -> float:
    got = set(found)
    return sum(1 for group in evidence if group & got) / len(evidence)
