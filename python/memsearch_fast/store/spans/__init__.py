"""Span vectors: each long chunk's sentences, embedded on their own, searched beside
the chunk vectors. Where they live: a file beside a Milvus Lite database
(:mod:`.file`, its reads :mod:`.reads`) or a companion collection on a Milvus
server (:mod:`.collection`); the fewer dimensions they are stored in
(:mod:`.basis`); how a chunk's best span joins the dense list (:mod:`.merge`);
the question's words in the lines that matched (:mod:`.words`). How a chunk
is cut into spans is the index's: :mod:`memsearch_fast.index.spans`."""
