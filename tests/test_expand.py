"""expand reads context from the markdown file with the chunker's line rules."""

from __future__ import annotations

from pathlib import Path

from memsearch_fast import chunk_markdown
from memsearch_fast.recall.expand import expand_chunk


def row_for(path: Path, index: int) -> dict:
    c = chunk_markdown(path.read_text(encoding="utf-8"), str(path))[index]
    return {
        "chunk_hash": "x",
        "source": str(path),
        "heading": c.heading,
        "heading_level": c.heading_level,
        "start_line": c.start_line,
        "end_line": c.end_line,
    }


def test_section_uses_newline_only_line_numbers(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    # Form feed and U+2028 are line breaks for str.splitlines(), not for the chunker.
    f.write_text("# One\nfirst\x0cstill first\u2028same line\n# Two\nsecond section\n", encoding="utf-8")
    row = row_for(f, 1)
    assert row["start_line"] == 3
    out = expand_chunk(row)
    assert out["start_line"] == 3 and out["content"].startswith("# Two\nsecond section")


def test_fenced_hash_does_not_end_a_section(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text("## Setup\nrun:\n```\n# not a heading\n```\nend\n## Next\nmore\n", encoding="utf-8")
    out = expand_chunk(row_for(f, 0))
    assert out["start_line"] == 1 and out["end_line"] == 6 and "# not a heading" in out["content"]


def test_lines_window_and_anchor(tmp_path: Path) -> None:
    f = tmp_path / "a.md"
    f.write_text(
        "# Day\n\n## Session\n<!-- session:abc turn:7 transcript:/t/abc.jsonl -->\nwork done\n", encoding="utf-8"
    )
    out = expand_chunk(row_for(f, 0), lines=0)
    assert out["anchor"] == {"session": "abc", "turn": "7", "transcript": "/t/abc.jsonl"}


def test_last_section_ends_at_the_last_line_as_the_reference(tmp_path: Path) -> None:
    """0.4.23 reads lines with splitlines(): a final newline ends the last line, no
    empty line after it, and CRLF lines come back with \\n."""
    f = tmp_path / "a.md"
    f.write_text("# One\nfirst\n# Two\nsecond section\nlast line\n", encoding="utf-8")
    out = expand_chunk(row_for(f, 1))
    assert (out["start_line"], out["end_line"]) == (3, 5)
    assert out["content"] == "# Two\nsecond section\nlast line"
    crlf = tmp_path / "b.md"
    crlf.write_bytes(b"# One\r\nfirst\r\n# Two\r\nsecond\r\n")
    row = row_for(crlf, 1)
    out = expand_chunk(row)
    assert out["content"] == "# Two\nsecond" and out["end_line"] == 4
    assert expand_chunk(row, lines=1)["content"] == "first\n# Two\nsecond"


def test_a_link_that_replaced_an_indexed_file_is_not_read(
    tmp_path: Path, db: Path, model_dir: Path, env: dict[str, str]
) -> None:
    """`memsearch expand` refuses, as `get` does, a source that now leads outside the indexed files."""
    import json
    import subprocess
    import sys

    notes = tmp_path / "notes"
    notes.mkdir()
    page = notes / "deploy.md"
    page.write_text("# Deploy\n\nDeploys go out on Tuesdays after the standup.\n", encoding="utf-8")
    secret = tmp_path / "secret.txt"
    secret.write_text("# Deploy\n\nthe root password is hunter2\n", encoding="utf-8")
    common = ["--milvus-uri", str(db)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memsearch_fast.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert cli("index", str(notes), "-m", str(model_dir), *common, "-q").returncode == 0
    found = cli("search", "deploy day", "-j", "-m", str(model_dir), *common)
    chunk = json.loads(found.stdout)[0]["chunk_hash"]
    assert "Tuesdays" in cli("expand", chunk, *common).stdout
    page.unlink()
    page.symlink_to(secret)
    out = cli("expand", chunk, *common)
    assert out.returncode != 0 and "hunter2" not in out.stdout + out.stderr
    assert "not indexed" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_anchors_of_the_reference_codex_and_opencode_plugins(tmp_path: Path) -> None:
    """0.4.23's Codex journals anchor ``session:… rollout:PATH``, its OpenCode journals
    ``session:… turn:… db:PATH``: expand shows their Session/Transcript header too."""
    from memsearch_fast.cli.display import format_expand

    f = tmp_path / "a.md"
    f.write_text(
        "# Day\n\n## Session 10:00\n\n### 10:00\n<!-- session:019a-c0de rollout:/h/.codex/sessions/r.jsonl -->\n"
        "- Codex fixed the build.\n\n### 11:00\n"
        "<!-- session:ses_1 turn:msg_2 db:/h/.local/share/opencode/opencode.db -->\n"
        "- OpenCode wrote the tests.\n",
        encoding="utf-8",
    )
    codex = expand_chunk(row_for(f, 0))
    assert codex["anchor"] == {
        "session": "019a-c0de",
        "turn": "",
        "transcript": "/h/.codex/sessions/r.jsonl",
        "kind": "rollout",
    }
    assert "Session: 019a-c0de  Turn: \nTranscript: /h/.codex/sessions/r.jsonl\n" in format_expand(codex)
    opencode = expand_chunk(row_for(f, 1))
    assert opencode["anchor"] == {
        "session": "ses_1",
        "turn": "msg_2",
        "transcript": "/h/.local/share/opencode/opencode.db",
        "kind": "db",
    }
    assert "Transcript: /h/.local/share/opencode/opencode.db" in format_expand(opencode)
