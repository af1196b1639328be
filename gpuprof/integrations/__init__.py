"""Code that runs inside the user's training process: the ``on_trace_ready`` handler for
``torch.profiler`` (``torch``), the few-steps profiler behind the callbacks
(``stepprofiler``) and the Lightning and Hugging Face callbacks (``lightning``, ``hf``).
torch is never imported here: the trainer has it already. Public import paths are
``gpuprof.torch``, ``gpuprof.lightning`` and ``gpuprof.hf``."""
