"""`model import`: local embedding models."""

from typing import Annotated, Optional

import typer

from memsearch_fast.cli.app import _guard, model_app
from memsearch_fast.cli.options import _text


@model_app.command("import")
@_guard
def model_import(
    src: Annotated[str, typer.Argument(metavar="SRC", show_default=False, help="Checkpoint directory or .zip of one.")],
    name: Annotated[
        Optional[str], _text("--name", help="Name to use with -m (default: the directory name).")
    ] = None,
    quantize: Annotated[
        bool, typer.Option("--quantize/--no-quantize", help="Also write an int8 model (used by default when present).")
    ] = True,
) -> None:
    """Convert a BERT-family sentence-transformers checkpoint to ONNX for local use."""
    from memsearch_fast.embeddings.convert import import_model

    path = import_model(src, name=name, quantize=quantize)
    typer.echo(f"Imported model to {path}")
    typer.echo(f"Use it with: memsearch index -m {name or path.name} PATHS...")
