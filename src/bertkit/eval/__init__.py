"""Official metrics: GLUE (metrics), SQuAD v1.1 exact match and F1 (squad), conlleval (conlleval),
retrieval as sentence-transformers' InformationRetrievalEvaluator defines it (retrieval).

`score` scores predictions files against gold files with them (`bertkit score`); `sts` is the
zero-shot similarity check of untrained sentence vectors.
"""
