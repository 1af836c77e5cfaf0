"""A corpus shaped like real agent memory, with planted facts and look-alikes.

Daily journals ``memory/YYYY-MM-DD.md`` as the agent plugins write them
(``## Session HH:MM`` on a session's first entry, then ``### HH:MM``, the
anchor ``<!-- session:<uuid> turn:<uuid> transcript:<path> -->`` and 6-14
bullets of mixed kinds: benchmarks with numbers, errors, decisions, file
paths, follow-ups, a few in Chinese), the project names recurring in every
kind of bullet; plus design docs under ``docs/<project>/`` whose sections
run over 400 tokens.

Each planted fact is one bullet at a random position of a random entry
(the last bullet in half of them), or one sentence inside a long doc
section (kind ``doc``). Every fact has look-alikes: the same sentence about
3 other projects with other values, and about the same project with another
subject (20 per template at 40 facts), so neither the sentence's shape nor
the project's name alone finds it. Questions are paraphrased (kind ``paraphrase`` shares no word with
its fact but the project's name); ``cjk`` facts are asked in Chinese.
A hit is a result whose content holds the fact's ``key``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

PROJECTS = (
    "sierra tango juniper falcon orchid basalt quartz harbor meadow cobalt ember willow kestrel aspen granite lotus"
).split()
PEOPLE = "Priya Okafor|Lars Lindqvist|Mei Tanaka|Diego Alvarez|Amara Nwosu|Jonas Weber|Sofia Rossi|Kenji Sato".split(
    "|"
)
SERVICES = "staging gateway|billing worker|search proxy|metrics collector|auth broker|image resizer".split("|")
COMPONENTS = "payment retry|session store|feature flag|audit log|thumbnail cache|webhook relay".split("|")
TECH = "NATS|Redis Streams|SQLite|ClickHouse|Temporal|DuckDB|Kafka".split("|")
OPS = "cold start|bulk import|search endpoint|nightly export|image upload|login flow".split("|")
CHANGES = "the index rebuild|switching to HTTP/2|the connection pool fix|caching the templates|the batch resize".split(
    "|"
)
ERRORS = "ConnectionResetError|OOMKilled|deadlock detected|SSL handshake timeout|disk quota exceeded".split("|")
CAUSES = (
    "a pool shared across forked workers|an unbounded retry loop|two migrations racing on the same table|"
    "a stale CA bundle in the base image|log files never rotated on the build hosts"
).split("|")
SYSTEMS = ["订单", "用户", "库存", "支付", "日志", "报表"]
HARD = ("oncall", "invoice", "memory", "android", "reviewers")


@dataclass(frozen=True)
class Fact:
    kind: str
    text: str  # the bullet (or doc sentence) planted
    question: str
    key: str  # unique text a hit must contain
    subject: tuple[str, str] = ("", "")  # (project, slot): what the question is about


# -- fact templates ------------------------------------------------------------------
# Each takes (rng, project, slot, n) where n is a number unique to the fact and
# returns (bullet text, key); QUESTIONS give the question for (project, slot).


def _port(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    port = 20000 + n
    return f"- The {p} {s} now listens on port {port} after the migration.", f"{p} {s} now listens on port {port}"


def _owner(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    a, b = rng.sample(PEOPLE, 2)
    return f"- {a} took over the {p} {s} rollout from {b} (ticket {n}).", f"{p} {s} rollout from {b} (ticket {n})"


def _decision(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    day = f"2025-{n % 12 + 1:02d}-{n % 28 + 1:02d}"
    tech = TECH[n % len(TECH)]
    key = f"Decided on {day} to move the {p} {s} queue to {tech}"
    return f"- {key}.", key


def _bench(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    a, b = 400 + n, 40 + n % 300
    change = rng.choice(CHANGES)
    key = f"{p} {s} p95 dropped from {a} ms to {b} ms"
    return f"- Benchmark: {key} after {change}.", key


def _error(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    path = f"services/{p}/{rng.choice(['db', 'net', 'jobs', 'io'])}/guard_{n}.py"
    return f"- Root cause of the {p} {s} failures: {rng.choice(CAUSES)}; fix in `{path}`.", path


def _hard(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    if s == "oncall":
        key = f"#{p}-oncall-{n}"
        return f"- Pager rota for {p} moves to {rng.choice(PEOPLE)}; alerts go to {key}.", key
    if s == "invoice":
        key = f"{p} invoices are generated on day {n % 26 + 2} of each month (ref {n})"
        return f"- {key} by the ledger job.", key
    if s == "memory":
        key = f"Raised worker memory for {p} to {rng.choice(['6', '12', '24', '48'])} GiB, ticket {n}"
        return f"- {key} after repeated OOM kills.", key
    if s == "android":
        key = f"{p} mobile client drops devices older than Android {n % 5 + 8}.{n % 10} (build {n})"
        return f"- The {key} next release.", key
    key = f"{p} main now need {n % 8 + 2} reviewers, rule {n}"
    return f"- Merges into {key} before the bot lands them.", key


def _doc(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    slug = s.replace(" ", "-")
    key = f"{p}-{slug}-dlq-{n}"
    retries = rng.randint(3, 12)
    return f"The {p} {s} retries a failed batch {retries} times, then parks it on the dead-letter topic {key}.", key


def _cjk(rng: random.Random, p: str, s: str, n: int) -> tuple[str, str]:
    key = f"{p} 项目的{s}数据库备份改到凌晨{n % 5 + 1}点，保留{n % 80 + 10}天"
    return f"- {key}。", key


TEMPLATES: dict[str, tuple[Callable[..., tuple[str, str]], list[str]]] = {
    "port": (_port, SERVICES),
    "owner": (_owner, COMPONENTS),
    "decision": (_decision, COMPONENTS),
    "bench": (_bench, OPS),
    "error": (_error, ERRORS),
    "paraphrase": (_hard, list(HARD)),
    "doc": (_doc, SERVICES),
    "cjk": (_cjk, SYSTEMS),
}

_HARD_Q = {
    "oncall": "who gets woken up when {p} breaks at night",
    "invoice": "when do {p} customers receive their bill",
    "memory": "how much RAM did the {p} machines get once they kept crashing",
    "android": "which old phones will the {p} app stop running on",
    "reviewers": "how many approvals does a {p} pull request require",
}


def question(kind: str, p: str, s: str) -> str:
    """How a user asks about the fact: its subject in other words (``paraphrase``:
    nothing in common but the project's name)."""
    if kind == "port":
        return f"which port is {p}'s {s} listening on since the migration"
    if kind == "owner":
        return f"who took over rolling out the {s} for {p}"
    if kind == "decision":
        return f"when was it decided to move the {p} {s} queue to another backend"
    if kind == "bench":
        return f"by how much has the p95 of the {p} {s} dropped"
    if kind == "error":
        return f"what was the root cause of the {s} failures in {p}"
    if kind == "paraphrase":
        return _HARD_Q[s].format(p=p)
    if kind == "doc":
        return f"how many retries does the {p} {s} make before a batch lands on the dead-letter topic"
    return f"{p} 的{s}数据库现在几点备份？"


#: Look-alikes of each fact: the sentence about other projects, and about the same
#: project with another subject (5 facts per kind at 40: 20 per template).
LOOK_ALIKES = (3, 1)


def make_facts(count: int, seed: int = 0) -> tuple[list[Fact], list[Fact]]:
    """(facts, look-alikes): *count* facts cycling through the kinds, and for
    each :data:`LOOK_ALIKES` look-alikes of its template."""
    rng = random.Random(1000 + seed)
    kinds = list(TEMPLATES)
    numbers = iter(rng.sample(range(100, 9999), 9899))
    facts: list[Fact] = []
    taken: set[tuple[str, str, str]] = set()
    while len(facts) < count:
        kind = kinds[len(facts) % len(kinds)]
        make, slots = TEMPLATES[kind]
        p, s = rng.choice(PROJECTS), rng.choice(slots)
        if (kind, p, s) in taken:
            continue
        taken.add((kind, p, s))
        text, key = make(rng, p, s, next(numbers))
        facts.append(Fact(kind, text, question(kind, p, s), key, (p, s)))
    decoys: list[Fact] = []
    for fact in facts:
        make, slots = TEMPLATES[fact.kind]
        p, s = fact.subject
        others = [(q, s) for q in rng.sample([q for q in PROJECTS if q != p], LOOK_ALIKES[0])]
        others += [(p, t) for t in rng.sample([t for t in slots if t != s], LOOK_ALIKES[1])]
        for q, t in others:
            if (fact.kind, q, t) in taken:
                continue  # another fact's subject: its look-alike would answer that question
            text, key = make(rng, q, t, next(numbers))
            decoys.append(Fact(fact.kind, text, question(fact.kind, q, t), key, (q, t)))
    keys = [f.key for f in facts]
    return facts, [d for d in decoys if not any(k in d.text for k in keys)]


# -- filler --------------------------------------------------------------------------

_WORDS = (
    "the migration finished after we raised the lock timeout and reran the backfill workers pull jobs "
    "in batches and acknowledge them only after the result is durably written a flaky test was caused "
    "by a shared temp directory so each worker now owns one the release checklist verifies the deploy "
    "key we switched the resize path to libvips retries back off exponentially with jitter"
).split()
_FILES = "api/routes.py|src/lib.rs|web/app.tsx|jobs/sync.py|db/schema.sql|Makefile|ci/deploy.yml|README.md".split("|")
_CJK_NOTES = ["索引重建完成", "首屏时间下降", "设计评审通过", "回滚到上一个版本", "压测结果稳定", "日志量明显减少"]


def _bullet(rng: random.Random) -> str:
    p, q = rng.sample(PROJECTS, 2)
    r = rng.random()
    if r < 0.18:
        op = rng.choice(OPS)
        return (
            f"- Benchmarked {p} {op}: p50 {rng.randint(5, 900)} ms, p95 {rng.randint(50, 3000)} ms "
            f"over {rng.randint(3, 200)} runs on {rng.choice(['a laptop', 'ci-large', 'the staging box'])}."
        )
    if r < 0.34:
        err = rng.choice([*ERRORS, "ImportError", "KeyError: 'token'", "TimeoutError"])
        return (
            f"- `{rng.choice(['pytest -x', 'cargo test', 'npm run build', 'make deploy'])}` failed in {p}: "
            f"`{err}` at `{p}/{rng.choice(_FILES)}:{rng.randint(10, 900)}`."
        )
    if r < 0.48:
        return (
            f"- Decision: {p} keeps {rng.choice(TECH)} for the {rng.choice(COMPONENTS)}; "
            f"revisit after the {q} {rng.choice(['launch', 'audit', 'migration', 'freeze'])}."
        )
    if r < 0.62:
        return (
            f"- Edited `{p}/{rng.choice(_FILES)}` and `{p}/{rng.choice(_FILES)}` to "
            f"{rng.choice(['simplify', 'harden', 'instrument', 'split'])} the {rng.choice(SERVICES)}."
        )
    if r < 0.74:
        return (
            f"- Follow-up: ask {rng.choice(PEOPLE)} about the {p} {rng.choice([*COMPONENTS, *SERVICES])} "
            f"before {rng.choice(['Monday', 'the demo', 'the release', 'Friday'])}."
        )
    if r < 0.80:
        return f"- {p} 的{rng.choice(SYSTEMS)}模块{rng.choice(_CJK_NOTES)}，{q} 那边下周跟进。"
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 22)))
    return f"- {p}: {words}."


def _anchor(rng: random.Random, project: str, session: str) -> str:
    turn = uuid.UUID(int=rng.getrandbits(128), version=4)
    return f"<!-- session:{session} turn:{turn} transcript:~/.claude/projects/-home-dev-{project}/{session}.jsonl -->"


def _doc_paragraph(rng: random.Random, p: str) -> list[str]:
    sentences = []
    for _ in range(rng.randint(4, 9)):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(10, 24)))
        sentences.append(f"In {p} {words}.".replace(f"In {p} the", f"In {p}, the"))
    return sentences


# -- layout --------------------------------------------------------------------------


@dataclass
class _Entry:
    session_heading: str | None
    stamp: str
    anchor: str
    bullets: list[str]


def write(root: Path, megabytes: float, facts: list[Fact], decoys: list[Fact], seed: int = 0) -> int:
    """Writes the journals and docs (about *megabytes*) with *facts* and *decoys*
    planted; returns bytes written."""
    rng = random.Random(2000 + seed)
    total = int(megabytes * 1_000_000)
    journal_bytes = int(total * 0.75)
    days: list[tuple[date, list[_Entry]]] = []
    day, size = date(2025, 1, 6), 0
    while size < journal_bytes:
        entries: list[_Entry] = []
        minute = rng.randint(7 * 60, 10 * 60)
        for _ in range(rng.randint(2, 5)):
            session = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            project = rng.choice(PROJECTS)
            for k in range(rng.randint(1, 4)):
                minute = min(minute + rng.randint(3, 40), 23 * 60 + 59)
                stamp = f"{minute // 60:02d}:{minute % 60:02d}"
                bullets = [_bullet(rng) for _ in range(rng.randint(6, 14))]
                anchor = _anchor(rng, project, session)
                entries.append(_Entry(stamp if k == 0 else None, stamp, anchor, bullets))
                size += sum(len(b.encode()) + 1 for b in bullets) + len(anchor) + 12
        days.append((day, entries))
        day += timedelta(days=1)
    docs: list[tuple[str, list[list[list[str]]]]] = []  # path, sections of paragraphs of sentences
    while size < total:
        p = rng.choice(PROJECTS)
        topic = rng.choice(["design", "runbook", "architecture", "postmortem", "onboarding"])
        path = f"docs/{p}/{topic}-{len(docs):03d}.md"
        sections = []
        for _ in range(rng.randint(3, 6)):
            paragraphs = [_doc_paragraph(rng, p) for _ in range(rng.randint(3, 6))]
            size += sum(len(" ".join(para)) + 2 for para in paragraphs) + 20
            sections.append(paragraphs)
        docs.append((path, sections))

    every_entry = [e for _, entries in days for e in entries]
    for fact in [*facts, *decoys]:
        if fact.kind == "doc" and docs:
            _path, sections = rng.choice(docs)
            paragraph = rng.choice(rng.choice(sections))
            paragraph.insert(rng.randint(0, len(paragraph)), fact.text)
            continue
        entry = rng.choice(every_entry)
        at = len(entry.bullets) if rng.random() < 0.5 else rng.randint(0, len(entry.bullets))
        entry.bullets.insert(at, fact.text)

    written = 0
    for day, entries in days:
        parts = [f"# {day.isoformat()}", ""]
        for e in entries:
            if e.session_heading:
                parts += [f"## Session {e.session_heading}", ""]
            parts += [f"### {e.stamp}", e.anchor, *e.bullets, ""]
        written += _write(root / "memory" / f"{day.isoformat()}.md", "\n".join(parts))
    for path, sections in docs:
        p = path.split("/")[1]
        parts = [f"# {p.capitalize()} {Path(path).stem.split('-')[0]}", ""]
        for i, paragraphs in enumerate(sections, start=1):
            parts += [f"## {p.capitalize()} section {i}", ""]
            for para in paragraphs:
                parts += [" ".join(para), ""]
        written += _write(root / path, "\n".join(parts))
    return written


def _write(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(data)
    return len(data)


def build(root: Path, megabytes: float, count: int, seed: int = 0) -> list[Fact]:
    facts, decoys = make_facts(count, seed)
    write(root, megabytes, facts, decoys, seed)
    return facts
