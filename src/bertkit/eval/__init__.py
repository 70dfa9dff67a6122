"""Official metrics: GLUE (metrics), SQuAD v1.1 exact match and F1 (squad), conlleval (conlleval)."""
