"""Phrases of the local host findings (:mod:`gpuprof.advice.local.host`): launch-bound
steps, framework and Python overhead, DDP's buffer broadcast; the actions fitted to what
the trace names (a compiled model, inference, vLLM, the optimizer)."""

from __future__ import annotations

from gpuprof.advice.phrasebook.book import specs, templates

# Optimizers of torch.optim with a fused implementation (a few kernels for the whole update),
# and those with a foreach one (one kernel per operation over all parameters).
_FUSED = ("Adam", "AdamW")
_FOREACH = ("SGD", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")


def optimizer_advice(optimizer: str) -> str:
    """The change for the optimizer the trace names (``SGD`` of ``Optimizer.step#SGD.step``):
    its own foreach or fused implementation, never another optimizer's."""
    if optimizer in _FUSED:
        return (
            f"torch.optim.{optimizer}(..., fused=True) runs the whole update in a few kernels "
            "(foreach=True batches it per operation)."
        )
    if optimizer in _FOREACH:
        return f"torch.optim.{optimizer}(..., foreach=True) batches the update over all parameters in a few kernels."
    return (
        "use a foreach or fused implementation of this optimizer if it has one, keep its state on the GPU, or "
        "run its expensive part (preconditioner updates) every N steps."
    )


specs({"optimizer_change": optimizer_advice})
templates({
    "title.host-launch-bound": "Kernel launches cannot keep up with many tiny kernels: fuse them or capture CUDA graphs",
    "title.host-overhead": "The host issues GPU work too slowly: framework and Python overhead between kernels",
    "host.in_launch": (
        "Rank {rank}: while the GPU waited, the host spent {share_pct:.0f}% of that "
        "time inside kernel launch calls, the rest in framework and Python work between them."
    ),
    "host.tiny_kernels": (
        "Rank {rank}: {share_pct:.0f}% of {kernels} kernels ran shorter than their own launch call "
        "(median kernel {kernel_median_us:.1f} µs, median launch {launch_median_us:.1f} µs)."
    ),
    "host.launch_rate": "Rank {rank} launched {per_ms:.1f} compute kernels per ms.",
    "host.ddp_elsewhere": (
        "Rank {rank}: DistributedDataParallel broadcasts its buffers at the start of every forward "
        "({broadcasts} broadcasts, {host_us:dur}{unit.slash} on the host, "
        "{lost_us:dur}{unit.slash} of GPU idle inside it): a recommendation of its own."
    ),
    "host.inference": "This is an inference workload (no backward or optimizer ops; inference markers).",
    "host.loader_in_process": (
        "The DataLoader runs in the training process and slows the host ops between kernels; fix "
        "the DataLoader first (its own recommendation) and profile again. Until then the estimate counts only the launch "
        "calls (the CUDA-graph replay, operators free, gives {upper_pct:.1f}%, much of it host time the "
        "DataLoader fix removes)."
    ),
    # the actions, by what the trace shows of the host
    "host.compiled_actions": (
        (
            "The model is already compiled (Inductor's triton_ kernels or compiled regions in the trace): capture "
            "CUDA graphs too "
            "(torch.compile(mode='reduce-overhead'), or torch.cuda.graphs around the compiled step) and look for graph "
            "breaks (TORCH_LOGS=graph_breaks) that leave parts of the step eager."
        ),
        "Give each kernel more work: a larger batch per GPU.",
        "Profile the host side (py-spy record --native) for the Python left between compiled regions.",
    ),
    "host.vllm": (
        "vLLM: do not set enforce_eager=True; let it capture CUDA graphs (compilation_config "
        "cudagraph_capture_sizes covering your batch sizes) and torch.compile the model."
    ),
    "host.inference_actions": (
        (
            "Capture the decode step in CUDA graphs (torch.compile(mode='reduce-overhead') or "
            "torch.cuda.graphs) so one replay replaces hundreds of eager launches."
        ),
        "Batch more requests per step so each kernel does more work.",
    ),
    "host.zero_grad": (
        "optimizer.zero_grad(set_to_none=True): the trace zero-fills every gradient with its own kernel "
        "launch (set_to_none is the default since PyTorch 2.0)."
    ),
    "host.optimizer_step": "{op} runs long on the host: {optimizer:optimizer_change}",
    "host.optimizer_named": "{op} is part of the host's time too: {optimizer:optimizer_change}",
    "host.optimizer_any": (
        "Use your optimizer's foreach or fused implementation (foreach=True; fused=True for Adam and AdamW)."
    ),
    "host.launch_bound_actions": (
        (
            "Compile the model: torch.compile(model) fuses elementwise kernels; "
            "mode='reduce-overhead' also captures CUDA graphs."
        ),
        "Capture the static part of the step in a CUDA graph (torch.cuda.graphs / make_graphed_callables).",
        "Give each kernel more work: a larger batch per GPU, or fewer, bigger layers.",
    ),
    "host.overhead_actions": (
        (
            "torch.compile(model) removes most per-op Python and framework overhead (mode='reduce-overhead' "
            "also captures CUDA graphs)."
        ),
        "Profile the host side (py-spy record --native, or the torch profiler's CPU view) to find the slow Python.",
        "Move CPU pre-processing, logging and metric code out of the step or into background threads.",
    ),
    # DDP's buffers
    "title.host-ddp-buffer-sync": "DDP re-broadcasts its buffers every step: turn it off",
    "host.ddp_broadcasts": (
        "Rank {rank}: {broadcasts} buffer broadcasts (flatten_dense_tensors, broadcast, "
        "unflatten_dense_tensors) take {host_us:dur}{unit.slash} on the host before the forward's first kernels."
    ),
    "host.ddp_broadcasts_window": (
        "Rank {rank}: {broadcasts} buffer broadcasts (flatten_dense_tensors, broadcast, "
        "unflatten_dense_tensors) take {host_us:dur} in the window on the host before the forward's first kernels."
    ),
    "host.ddp_actions": (
        (
            "DistributedDataParallel(model, broadcast_buffers=False): the buffers (e.g. BatchNorm running "
            "stats) start equal on every rank; broadcasting them each forward is rarely needed."
        ),
        "If buffers must agree, use SyncBatchNorm or sync them every N steps instead.",
    ),
})
