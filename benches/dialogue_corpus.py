"""Conversations rendered as daily memory files, with planted statements.

Each ``memory/YYYY-MM-DD.md`` holds 1-3 meetings; a meeting is one entry
(``## Session HH:MM``, ``### HH:MM``, the anchor comment) whose lines are
``- Participants: …; topic: …`` and then 10-24 speaker lines
``- Name: what they said``. Project names recur in the small talk.

Planted statements, each with look-alikes (the same line about 3 other
projects, by other speakers, with other values, and about the same project
on another subject: 40 per kind at 40 statements). Kinds: ``who`` (who proposed something: the line
names the speaker), ``when`` (a date someone gave), ``after`` (what was done
after an event: the event is one line, the action a later line of the same
meeting, and the question names only the event), ``said`` (what one person
said about a subject, asked by the person's name). A hit is a result whose
content holds the statement's key.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from benches.agent_corpus import LOOK_ALIKES, PROJECTS, SERVICES, Fact

SPEAKERS = "Priya|Lars|Mei|Diego|Amara|Jonas|Sofia|Kenji|Ines|Tomás".split("|")
#: Proposal → the question's wording of it (no shared word but the project's name).
PROPOSALS = {
    "freeze deploys on Fridays": "stop shipping {p} before weekends",
    "rotate the signing keys every {n} days": "change the {p} credentials on a schedule",
    "split the webhook relay into its own service": "break out the {p} callback forwarder",
    "drop the legacy v1 endpoints by {n} requests a day": "retire the old {p} API",
    "move the nightly backups to a second region": "keep {p} copies somewhere else overnight",
}
FEATURES = "dark mode|bulk export|SSO login|offline sync|audit trail|usage billing".split("|")
TOPICS = "the pricing page|error budgets|the hiring plan|the on-call load|test flakiness|the Q3 roadmap".split("|")
OPINIONS = (
    "is blocked until the data team signs off, ticket {n}|needs {n} more engineers before it can move|"
    "costs {n} dollars a month more than we budgeted|should wait until the {n} customers on the beta reply"
).split("|")
ACTIONS = (
    "rolled {p} back to v{v}|paged the {p} database on-call and opened incident {n}|"
    "froze all {p} merges and started postmortem {n}|switched {p} traffic to the standby cluster (change {n})"
).split("|")

_SMALL = [
    "I pushed the fix for the {p} {s}, can someone review it?",
    "Let's sync on {p} after lunch.",
    "The {p} dashboard shows {n} errors since this morning.",
    "Agreed, let's keep it simple for now.",
    "I can take that one.",
    "Can you share the link to the {p} design doc?",
    "{p} staging is green again.",
    "I'm still waiting on the {p} credentials.",
    "The {p} {s} release notes are in the shared folder.",
    "Makes sense to me.",
    "We should write that down for {p}.",
    "I'll check the {p} logs tonight.",
    "{p} 的发布时间可能要推迟一周。",
    "No objections from my side.",
]


@dataclass(frozen=True)
class _Plant:
    kind: str
    lines: list[str]  # one line, or two for ``after`` (event, then action)
    fact: Fact

    @property
    def subject(self) -> tuple[str, str, str]:
        return (self.kind, *self.fact.subject)


def _make(kind: str, rng: random.Random, p: str, slot: str, n: int, speaker: str) -> _Plant:
    if kind == "who":
        line = f"{speaker}: I suggest we {slot.format(n=n)} for {p}."
        q = f"who proposed that we {PROPOSALS[slot].format(p=p)}"
        return _Plant(kind, [f"- {line}"], Fact(kind, line, q, line.rstrip("."), (p, slot)))
    if kind == "when":
        day = date(2025, 1, 1) + timedelta(days=n % 360)
        key = f"{p} {slot} ships on {day:%B} {day.day}"
        line = f"{speaker}: {key}, if QA passes (build {n})."
        q = f"when is {slot} going out for {p}"
        return _Plant(kind, [f"- {line}"], Fact(kind, line, q, key, (p, slot)))
    if kind == "after":
        event = f"{rng.choice(SPEAKERS)}: the {p} {slot} went down at {n % 24:02d}:{n % 60:02d}."
        action = rng.choice(ACTIONS).format(p=p, v=f"{n % 9 + 1}.{n % 17}", n=n)
        key = f"{action}"
        line = f"{speaker}: after that I {action}."
        q = f"what did we do once the {p} {slot} outage started"
        return _Plant(kind, [f"- {event}", f"- {line}"], Fact(kind, line, q, key, (p, slot)))
    key = f"{speaker}: for {p}, {slot} {rng.choice(OPINIONS).format(n=n)}"
    q = f"what did {speaker} think about {slot} for {p}"
    return _Plant(kind, [f"- {key}."], Fact(kind, key, q, key, (p, slot)))


_SLOTS = {"who": list(PROPOSALS), "when": FEATURES, "after": SERVICES, "said": TOPICS}


def make_plants(count: int, seed: int = 0) -> tuple[list[_Plant], list[_Plant]]:
    rng = random.Random(3000 + seed)
    numbers = iter(rng.sample(range(100, 9999), 9899))
    kinds = list(_SLOTS)
    plants: list[_Plant] = []
    taken: set[tuple[str, str, str]] = set()
    while len(plants) < count:
        kind = kinds[len(plants) % len(kinds)]
        p, slot, speaker = rng.choice(PROJECTS), rng.choice(_SLOTS[kind]), rng.choice(SPEAKERS)
        plant = _make(kind, rng, p, slot, next(numbers), speaker)
        if plant.subject in taken:
            continue
        taken.add(plant.subject)
        plants.append(plant)
    decoys: list[_Plant] = []
    for plant in plants:
        p, slot = plant.fact.subject
        others = [(q, slot) for q in rng.sample([q for q in PROJECTS if q != p], LOOK_ALIKES[0])]
        others += [(p, s) for s in rng.sample([s for s in _SLOTS[plant.kind] if s != slot], LOOK_ALIKES[1])]
        for q, s in others:
            decoy = _make(plant.kind, rng, q, s, next(numbers), rng.choice(SPEAKERS))
            if decoy.subject not in taken:
                decoys.append(decoy)
    keys = [p.fact.key for p in plants]
    return plants, [d for d in decoys if not any(k in line for k in keys for line in d.lines)]


def make_facts(count: int, seed: int = 0) -> list[Fact]:
    return [p.fact for p in make_plants(count, seed)[0]]


def write(root: Path, megabytes: float, plants: list[_Plant], decoys: list[_Plant], seed: int = 0) -> int:
    rng = random.Random(4000 + seed)
    total = int(megabytes * 1_000_000)
    meetings: list[tuple[date, str, list[str], list[str]]] = []  # day, stamp, header lines, speaker lines
    day, size = date(2025, 2, 3), 0
    while size < total:
        minute = rng.randint(8 * 60, 11 * 60)
        for _ in range(rng.randint(1, 3)):
            minute = min(minute + rng.randint(30, 180), 23 * 60 + 59)
            stamp = f"{minute // 60:02d}:{minute % 60:02d}"
            people = rng.sample(SPEAKERS, rng.randint(2, 5))
            project = rng.choice(PROJECTS)
            session = uuid.UUID(int=rng.getrandbits(128), version=4)
            turn = uuid.UUID(int=rng.getrandbits(128), version=4)
            header = [
                f"### {stamp}",
                f"<!-- session:{session} turn:{turn} "
                f"transcript:~/.claude/projects/-home-dev-{project}/{session}.jsonl -->",
                f"- Participants: {', '.join(people)}; topic: {project} {rng.choice(TOPICS)}",
            ]
            lines = []
            for _ in range(rng.randint(10, 24)):
                text = rng.choice(_SMALL).format(p=rng.choice(PROJECTS), s=rng.choice(SERVICES), n=rng.randint(2, 500))
                lines.append(f"- {rng.choice(people)}: {text}")
            meetings.append((day, stamp, header, lines))
            size += sum(len(x.encode()) + 1 for x in header + lines) + 24
        day += timedelta(days=1)
    for plant in [*plants, *decoys]:
        _, _, header, lines = rng.choice(meetings)
        for line in plant.lines:  # whoever speaks took part
            name = line[2:].split(":", 1)[0]
            listed, topic = header[2].split("; topic: ", 1)
            if name not in listed.split(": ", 1)[1].split(", "):
                header[2] = f"{listed}, {name}; topic: {topic}"
        at = rng.randint(0, len(lines))
        if len(plant.lines) == 2:
            gap = rng.randint(1, 4)
            lines.insert(at, plant.lines[0])
            lines.insert(min(len(lines), at + 1 + gap), plant.lines[1])
        else:
            lines.insert(at, plant.lines[0])
    written = 0
    by_day: dict[date, list[str]] = {}
    for day, stamp, header, lines in meetings:
        parts = by_day.setdefault(day, [f"# {day.isoformat()}", ""])
        parts += [f"## Session {stamp}", "", *header, *lines, ""]
    for day, parts in by_day.items():
        path = root / "memory" / f"{day.isoformat()}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "\n".join(parts).encode("utf-8")
        path.write_bytes(data)
        written += len(data)
    return written


def build(root: Path, megabytes: float, count: int, seed: int = 0) -> list[Fact]:
    plants, decoys = make_plants(count, seed)
    write(root, megabytes, plants, decoys, seed)
    return [p.fact for p in plants]
