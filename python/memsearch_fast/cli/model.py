"""`model import`: local embedding models."""

from typing import Annotated

import typer

from memsearch_fast.cli.app import guard, model_app
from memsearch_fast.cli.options import text


@model_app.command("import")
@guard
def model_import(
    src: Annotated[str, typer.Argument(metavar="SRC", show_default=False, help="Checkpoint directory or .zip of one.")],
    name: Annotated[
        str | None, text("--name", help="Name to use with -m or --reranker-model (default: the directory name).")
    ] = None,
    quantize: Annotated[
        bool, typer.Option("--quantize/--no-quantize", help="Also write an int8 model (used by default when present).")
    ] = True,
) -> None:
    """Convert a BERT-family checkpoint to ONNX for local use.

    A sentence-transformers checkpoint becomes an embedding model (-m); a
    BertForSequenceClassification cross-encoder becomes a reranker
    (search --reranker-model).
    """
    from memsearch_fast.embeddings.models import import_model
    from memsearch_fast.recall.rerank import is_cross_encoder

    path = import_model(src, name=name, quantize=quantize)
    typer.echo(f"Imported model to {path}")
    if is_cross_encoder(path):
        typer.echo(f"Use it with: memsearch search --reranker-model {name or path.name} QUERY")
    else:
        typer.echo(f"Use it with: memsearch index -m {name or path.name} PATHS...")
