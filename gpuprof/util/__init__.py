"""Helpers every stage may use, importing nothing of gpuprof but its errors: output files
written whole or not at all (``atomic``), text made safe for a terminal (``safetext``),
"did you mean" (``suggest``) and the one way numbers are written in prose (``phrases``)."""
