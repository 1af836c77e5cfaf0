"""`stats`, `reset` and `status`: look at or drop the index, look at the database's service."""

from typing import Annotated, Any

import typer

from memsearch_fast.cli.app import app, err, fail, guard, stdin_is_tty
from memsearch_fast.cli.options import (
    MILVUS,
    JsonOutput,
    MilvusOptions,
    flatten,
    memsearch,
    missing_collection,
    settings,
)


@app.command()
@guard
@flatten
def stats(
    milvus: MilvusOptions = MILVUS,
    json_output: JsonOutput = False,
) -> None:
    """Show statistics about the index."""
    from memsearch_fast.cli import display
    from memsearch_fast.serve import reads

    cfg = settings(milvus)
    counts = reads.stats(cfg)
    if counts is None:  # no service, or an answer this process gives with its reason
        ms = memsearch(cfg)
        try:
            counts = ms.stats()
        finally:
            ms.close()
    if counts is None:
        fail(missing_collection(cfg))
    info = {
        **counts,
        "collection": cfg.milvus.collection,
        "uri": cfg.milvus.uri,
        "provider": cfg.embedding.provider,
        "model": cfg.embedding.model,
    }
    typer.echo(display.to_json(info) if json_output else display.format_stats(info))


@app.command()
@guard
@flatten
def reset(
    milvus: MilvusOptions = MILVUS,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the action without prompting.")] = False,
) -> None:
    """Drop all indexed data."""
    cfg = settings(milvus)
    name = cfg.milvus.collection
    if not yes:
        question = f"This will delete all indexed data in collection '{name}'. Continue?"
        if stdin_is_tty():
            if not typer.confirm(question):
                fail("aborted; nothing was dropped")
        else:
            # A piped answer counts, as with 0.4.23 (`echo y | memsearch reset`);
            # no answer (a closed or empty stdin) drops nothing.
            import sys

            answer = sys.stdin.readline() if sys.stdin is not None else ""
            if answer.strip().lower() not in ("y", "yes"):
                fail(f"refusing to drop collection '{name}' without confirmation; pass --yes (or pipe 'y')")
    ms = memsearch(cfg)
    try:
        dropped = ms.drop(on_wait=err)
    finally:
        ms.close()
    if not dropped:
        typer.echo(f"Collection '{name}' does not exist; nothing to drop.")
        return
    typer.echo(f"Dropped collection '{name}'.")


def _rss_kb(pid: object) -> int | None:
    """Resident memory of *pid* in KiB (Linux), or None."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def service_info(db_path: str) -> dict[str, Any]:
    """The database's service as `status` shows it: pid, RSS, uptime, models, roots, queue."""
    import time

    from memsearch_fast.lite.broker import server_status
    from memsearch_fast.serve import client

    st = server_status(db_path)
    if st is None:
        return {"database": db_path, "running": False}
    server_kb = _rss_kb(st["pid"]) if isinstance(st.get("pid"), int) else None
    engine_pid = st.get("engine_pid")
    engine_kb = _rss_kb(engine_pid) if isinstance(engine_pid, int) and engine_pid != st.get("pid") else None
    rss = [r for r in (server_kb, engine_kb) if r is not None]
    started = st.get("started")
    info: dict[str, Any] = {
        "database": db_path,
        "running": True,
        "pid": st.get("pid"),
        "engine": st.get("engine"),
        "engine_pid": st.get("engine_pid"),
        "rss_mb": round(sum(rss) / 1024, 1) if rss else None,  # both processes together
        "server_rss_mb": round(server_kb / 1024, 1) if server_kb is not None else None,
        "engine_rss_mb": round(engine_kb / 1024, 1) if engine_kb is not None else None,
        "uptime_s": round(time.time() - started, 1) if isinstance(started, (int, float)) else None,
        "idle_timeout_s": st.get("idle_timeout"),
    }
    served = client.status(db_path)
    info.update(served if served is not None else {"models": None, "roots": None, "queue": None})
    return info


def _rss_line(info: dict[str, Any]) -> str:
    """Both processes' resident memory, and each one's: the engine holds the loaded collections."""
    server, engine = info.get("server_rss_mb"), info.get("engine_rss_mb")
    if server is None or engine is None:
        return f"{info['rss_mb']} MB"
    return f"{info['rss_mb']} MB (service {server} MB, engine {engine} MB)"


def _format_service(info: dict[str, Any]) -> str:
    import time

    if not info["running"]:
        return f"No service running for {info['database']}."
    lines = [
        f"Service for {info['database']}: pid {info['pid']} (engine pid {info['engine_pid']}, {info['engine']})",
        f"  RSS {_rss_line(info)}, up {info['uptime_s']:.0f} s, exits after {info['idle_timeout_s']:.0f} s idle",
    ]
    if info.get("roots") is None:
        lines.append("  (its service socket does not answer: another installation, or starting)")
        return "\n".join(lines)
    models = ", ".join(f"{m['model']}" + (" (in use)" if m["in_use"] else "") for m in info["models"]) or "none"
    lines.append(f"  models loaded: {models}")
    release = info.get("release")
    if release and (release["idle_s"] > 0 or release.get("loaded")):
        rules = [f"after {release['idle_s']:.0f} s idle"] if release["idle_s"] > 0 else []
        rules += [f"past {release['loaded']} loaded"] if release.get("loaded") else []
        lines.append(f"  collections released {' or '.join(rules)} ({release['released']} so far)")
    lines.append(
        f"  watched roots: {len(info['roots'])}, queue: {info['queue']}, index runs: {info.get('index_runs', 0)}"
    )
    for r in info["roots"]:
        lines.append(f"  - {r['root']} [{r['collection']}] {r['state']}, {r['runs']} run(s)")
        run = r.get("run")
        if run:
            lines.append(
                f"      this run: {run['read']} of {run['files']} files read, "
                f"{run['embedded']} of {run['queued']} chunks embedded"
            )
        last = r.get("last_run")
        if last:
            ago = time.time() - last["at"]
            what = (
                f"error: {last['error']}"
                if "error" in last
                else f"{last['changed']} changed, {last['embedded']} embedded in {last['seconds']:.2f} s"
            )
            lines.append(f"      last run {ago:.0f} s ago: {what}")
        for lease in r["leases"]:
            pid = f"pid {lease['pid']}" if lease["pid"] else "no pid"
            lines.append(f"      lease {lease['holder']} ({pid}), expires in {lease['expires_in']:.0f} s")
    return "\n".join(lines)


@app.command()
@guard
@flatten
def status(
    milvus: MilvusOptions = MILVUS,
    json_output: JsonOutput = False,
) -> None:
    """Show the local database's service: pid, RSS, uptime, models, watched roots and leases."""
    from pathlib import Path

    from memsearch_fast.cli import display
    from memsearch_fast.store.compat import is_local_uri

    cfg = settings(milvus)
    uri = str(cfg.milvus.uri)
    if not is_local_uri(uri):
        info: dict[str, Any] = {"database": uri, "running": False, "local": False}
        typer.echo(display.to_json(info) if json_output else f"{uri} is a Milvus server: no local service.")
        return
    from memsearch_fast.lite.size import too_large

    db_path = str(Path(uri).expanduser().resolve())
    info = service_info(db_path)
    note = too_large(db_path)
    if note:
        info["size_note"] = note
    typer.echo(display.to_json(info) if json_output else "\n".join(filter(None, [_format_service(info), note])))
