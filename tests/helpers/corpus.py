"""Deterministic markdown corpora for benchmarks and differential tests.

Two styles, mixed: agent daily logs (``memory/YYYY-MM-DD.md`` with session
headings, HTML-comment anchors, short paragraphs, some CJK) and documentation
(deep heading trees, long paragraphs, lists, optional code fences).
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

EN = (
    "the migration to postgres finished after we raised the lock timeout and reran the backfill "
    "workers pull jobs in batches and acknowledge them only after the result is durably written "
    "a flaky test was caused by a shared temp directory between parallel workers so each worker "
    "now owns a directory the release checklist gained a step that verifies the deploy key "
    "fingerprint we benchmarked the thumbnail service and switched the resize path to libvips "
    "idempotency keys make a replayed job safe because the second write of a key is a no-op "
    "retries back off exponentially with full jitter from one second up to a minute"
).split()
CJK = list("数据库迁移完成索引重建搜索页面改版性能预算首屏时间设计团队讨论决定保留过滤栏排序选项结果列表原型提交")
JA = list("テストを実行しました検索結果のランキングを改善します")


def _sentence(rng: random.Random, cjk_ratio: float) -> str:
    if rng.random() < cjk_ratio:
        pool = CJK if rng.random() < 0.8 else JA
        return "".join(rng.choice(pool) for _ in range(rng.randint(8, 40))) + rng.choice("。！？；")
    words = [rng.choice(EN) for _ in range(rng.randint(6, 24))]
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(["`config.toml`", "v2.4.1", "api.example.com", "#42"]))
    return " ".join(words).capitalize() + rng.choice([".", ".", ".", "!", "?", ";"])


def _paragraph(rng: random.Random, cjk_ratio: float, width: int = 100) -> str:
    text = " ".join(_sentence(rng, cjk_ratio) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.5:
        return text
    lines, line = [], ""
    for word in text.split(" "):
        if len(line) + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "\n".join(lines)


def daily_log(rng: random.Random, day: date, cjk_ratio: float = 0.1) -> str:
    parts = [f"# {day.isoformat()}", ""]
    for _ in range(rng.randint(3, 12)):
        hh, mm = rng.randint(0, 23), rng.randint(0, 59)
        parts.append(f"## Session {hh:02d}:{mm:02d}")
        sid = f"{rng.getrandbits(32):08x}"
        parts.append(f"<!-- session:{sid} turn:{rng.randint(1, 40)} transcript:~/.claude/projects/p/{sid}.jsonl -->")
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.3:
                parts.extend(f"- {_sentence(rng, cjk_ratio)}" for _ in range(rng.randint(2, 5)))
            else:
                parts.append(_paragraph(rng, cjk_ratio))
            parts.append("")
    return "\n".join(parts)


def doc_page(rng: random.Random, title: str, fences: bool, cjk_ratio: float = 0.05) -> str:
    parts = [f"# {title}", "", _paragraph(rng, cjk_ratio), ""]
    for s in range(rng.randint(3, 10)):
        parts.append(f"## Section {s + 1}")
        parts.append("")
        for _ in range(rng.randint(2, 8)):
            parts.append(_paragraph(rng, cjk_ratio, width=rng.choice([80, 100, 10_000])))
            parts.append("")
        if fences and rng.random() < 0.4:
            parts += ["```bash", "# install the service", "make install PREFIX=/opt/svc", "```", ""]
        if rng.random() < 0.5:
            parts.append(f"### Details {s + 1}.{rng.randint(1, 9)}")
            parts.append(_paragraph(rng, cjk_ratio))
            parts.append("")
    return "\n".join(parts)


def write_corpus(root: Path, *, total_bytes: int, seed: int = 0, fences: bool = True) -> int:
    """Writes about *total_bytes* of markdown under *root*; returns bytes written."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    written = 0
    day = date(2024, 1, 1)
    n = 0
    while written < total_bytes:
        if n % 2 == 0:
            path = root / "memory" / f"{day.isoformat()}.md"
            text = daily_log(rng, day)
            day += timedelta(days=1)
        else:
            path = root / "docs" / f"area{n % 17}" / f"page-{n:05d}.md"
            text = doc_page(rng, f"Page {n}", fences)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        path.write_bytes(data)
        written += len(data)
        n += 1
    return written
