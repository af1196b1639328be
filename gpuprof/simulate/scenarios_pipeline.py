"""The pipeline-parallel scenario: the program each rank of a pipeline job runs.

:func:`pipeline` checks its knobs, builds the job's shape and work
(:class:`~gpuprof.simulate.pipeline_job.PipelineJob`) and returns the plan whose program
runs, on each rank, the stage's schedule (:mod:`gpuprof.simulate.schedules`): the forward
and backward chunks of every microbatch, the transfers between neighbouring stages (a
buffered send and a receive, or one batched exchange), the drain, then the end-of-step
collectives (the last stage's untimed loss all-reduce over the data-parallel group, the
layernorm gradients' all-reduce over the tensor-parallel group, embedding and gradient
all-reduces or the distributed optimizer's reduce-scatter and all-gather, the gradient
norm) and the optimizer step, with a Megatron-style timer op for each (none for the loss
all-reduce, which Megatron does not time).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import nullcontext
from statistics import mean
from typing import Any

from gpuprof.simulate import comm
from gpuprof.simulate import workload as wl
from gpuprof.simulate.engine import COMPUTE_STREAM, Program, Wait
from gpuprof.simulate.fixes import DOUBLE_MICROBATCHES, NO_VARIATION
from gpuprof.simulate.pipeline_job import PipelineJob, drain_bubble
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.schedules import SCHEDULES, stage_order, theoretical_bubble
from gpuprof.simulate.workload import allreduce, sharded, waited


def pipeline(
    *, stages: int = 4, microbatches: int = 8, schedule: str = "1f1b", chunks: int = 2,
    dp: int = 1, tp: int = 1, steps: int = 2,
    stage_ms: float = 1.0, act_mb: float = 4.0, grad_mb: float = 50.0, link_gbs: float = 200.0,
    slow_stage: int = -1, slow_rank: int = -1, slowdown: float = 1.5,
    replica_spread: float = 0.0, seq_cv: float = 0.0,
    annotate: bool = True, dist_opt: bool = False, tied_embeddings: bool = False, batched_p2p: bool = False,
    sequence_parallel: bool = False, loss_dp_sync: bool = False, launch_gap_us: float = 0.0,
    slow_link: int = -1, slow_link_replica: int = 0, link_slowdown: float = 1.0,
    slow_dp_group: int = -1, group_slowdown: float = 1.0,
    seed: int = 0,
) -> Plan:  # fmt: skip
    """Pipeline parallelism (times data parallelism with dp > 1); optionally a slow stage or rank.

    Ranks are laid out as Megatron-LM does with no tensor parallelism: rank = stage * dp +
    replica. After the pipeline flush each stage all-reduces its gradients over its
    data-parallel group (with ``dist_opt``: reduce-scatters them, and all-gathers the
    parameters at the start of the next step, as Megatron's distributed optimizer does),
    then the pipeline group all-reduces the gradient norm and reads it with ``.item()``
    before the optimizer step.

    A slow stage (more layers than the others) is slow on every replica; a slow rank is
    one GPU slower than the ranks that run the same stage; ``replica_spread`` makes the
    data-parallel replicas slower in steps up to that fraction (replica d by
    ``spread * d / (dp - 1)``, all its stages: a slower node). With
    ``annotate`` off, no ``forward_step`` / ``backward_step`` ranges mark the
    microbatches: only the NCCL send/recv kernels between stages show them.

    ``seq_cv`` makes each microbatch's work vary with its sequence lengths: a factor drawn
    per (replica, step, microbatch) from a gamma distribution of mean 1 and that
    coefficient of variation, the same on every stage of the replica (the microbatch
    flows through its pipeline). ``tied_embeddings``: the first and the last stage of each
    replica all-reduce their embedding gradients after the pipeline (Megatron's
    ``embedding-grads-all-reduce``). With ``dist_opt`` the gradient-norm all-reduce runs
    over every rank (the distributed optimizer's shards), else over the pipeline group.
    ``batched_p2p``: the steady-state exchanges of 1F1B are single calls that both stages
    wait for (Megatron's ``send_forward_recv_backward``: the data moves once both have
    posted), not a buffered send and a receive (megatron layout only).
    ``tp`` is the job's tensor-parallel size: the ranks simulated are TP rank 0 of each
    (pipeline, data-parallel) position, which is what the Megatron layout writes (global
    rank ``(stage * dp + replica) * tp``); their TP peers do the same work.

    Written as real exports record them: ``sequence_parallel`` (with ``tp > 1``) all-reduces
    the layernorm gradients over the tensor-parallel group after the pipeline
    (``layernorm-grads-all-reduce``; the TP peers are in step, so nobody waits in it);
    ``loss_dp_sync`` makes the last stage all-reduce the step's loss over its data-parallel
    group before that, untimed, so that a late replica's last stage holds the others' last
    stage before their next timed op; ``launch_gap_us`` is the Python between Megatron's
    timers: before each compute op the host synchronizes with the device (the timer's
    ``torch.cuda.synchronize()``) and runs that long before its first launch, so that ops
    are not packed back to back on the device.

    One slow link or collective group: ``slow_link = s`` makes the point-to-point
    transfers between stage ``s`` and ``s + 1`` of replica ``slow_link_replica`` take
    ``link_slowdown`` times as long (a bad NIC or cable); ``slow_dp_group = s`` makes stage
    ``s``'s data-parallel collectives (gradient reduce-scatter or all-reduce, parameter
    all-gather, the loss all-reduce) run at ``1 / group_slowdown`` of the bandwidth.
    """
    check(schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}")
    check(stages >= 2 and microbatches >= 1 and dp >= 1, "need stages >= 2, microbatches >= 1, dp >= 1")
    v = chunks if schedule == "interleaved" else 1
    check(
        schedule != "interleaved" or (chunks >= 2 and microbatches % stages == 0),
        "interleaved needs chunks >= 2 and microbatches divisible by stages",
    )
    check(-1 <= slow_stage < stages, f"slow_stage must be -1 or in 0..{stages - 1}")
    check(-1 <= slow_rank < stages * dp, f"slow_rank must be -1 or in 0..{stages * dp - 1}")
    check(slowdown > 0 and replica_spread >= 0, "slowdown must be > 0 and replica_spread >= 0")
    check(tp >= 1 and seq_cv >= 0, "need tp >= 1 and seq_cv >= 0")
    check(launch_gap_us >= 0, "launch_gap_us must be >= 0")
    check(-1 <= slow_link < stages - 1, f"slow_link must be -1 or in 0..{stages - 2}")
    check(0 <= slow_link_replica < dp, f"slow_link_replica must be in 0..{dp - 1}")
    check(-1 <= slow_dp_group < stages, f"slow_dp_group must be -1 or in 0..{stages - 1}")
    check(link_slowdown > 0 and group_slowdown > 0, "link_slowdown and group_slowdown must be > 0")
    job = PipelineJob(
        stages=stages, dp=dp, microbatches=microbatches, steps=steps,
        slow_stage=slow_stage, slow_rank=slow_rank, slowdown=slowdown, replica_spread=replica_spread,
        seq_cv=seq_cv, tied_embeddings=tied_embeddings, seed=seed,
        slow_link=slow_link, slow_link_replica=slow_link_replica, link_slowdown=link_slowdown,
        slow_dp_group=slow_dp_group if dp > 1 else -1, group_slowdown=group_slowdown,
    )  # fmt: skip
    p = stages
    n = p * dp
    xfer_us = act_mb * 1e6 / (link_gbs * 1e3)
    nelems = int(act_mb * 1e6 // 2)

    def program(sim: RankSim) -> Program:
        s, d = divmod(sim.rank, dp)
        pp_name, pp_ranks = job.pp_group(d)
        f = job.compute_factors(sim.fixes)[sim.rank]
        half = DOUBLE_MICROBATCHES in sim.fixes  # twice the microbatches, each half the work
        m = microbatches * 2 if half else microbatches
        share = 0.5 if half else 1.0
        order = stage_order(schedule, s, p, m, chunks)
        links = job.link_factors(sim.fixes)
        # this stage's data-parallel collectives run at 1 / factor of the bandwidth
        dp_gbs = link_gbs / job.group_factors(sim.fixes)[s]

        def link_f(to_stage: int) -> float:
            """Transfer-time factor of the link to ``to_stage`` (a chunk's stage, any lap)."""
            i = job.link_index(d, s, to_stage % p)
            return 1.0 if i is None else links[i]

        def xfer(
            kind: str, to_stage: int, key: tuple[Any, ...], timer: str
        ) -> Generator[Wait, None, tuple[float, float]]:
            peer = (to_stage % p) * dp + d
            return comm.p2p(
                sim,
                kind,
                peer,
                key,
                nelems=int(nelems * share),
                transfer_us=xfer_us * share * link_f(to_stage),
                ranks=pp_ranks,
                pg=pp_name,
                timer=("pp-comm", timer, {"step": key[1]}),
            )

        def exchange(
            to_stage: int, send_key: tuple[Any, ...], recv_key: tuple[Any, ...], names: tuple[str, str]
        ) -> Generator[Wait, None, tuple[float, float]]:
            return comm.exchange(
                sim,
                (to_stage % p) * dp + d,
                send_key,
                recv_key,
                transfer_us=xfer_us * share * link_f(to_stage),
                timers=(
                    ("pp-comm", names[0], {"step": send_key[1]}),
                    ("pp-comm", names[1], {"step": recv_key[1]}),
                ),
            )

        def reduce(
            kind: str, what: str, nbytes: float, group: tuple[str, list[int], str], timer: str | None,
            gbs: float = link_gbs, **ids: int,
        ) -> Generator[Wait, None, None]:  # fmt: skip
            """An all-reduce, reduce-scatter or all-gather (``kind``) of ``nbytes`` of this
            step's ``what`` over ``group`` (its name, ranks and description) at ``gbs``, which
            the compute stream then waits for; its timer op is ``timer`` (``None``: untimed)."""
            (pg, ranks, desc), key = group, (what, step)
            t = None if timer is None else ("dp-comm", timer, {"step": step + 1, **ids})
            yield from waited(
                sim,
                allreduce(sim, key, nbytes, ranks, gbs, pg=pg, pg_desc=desc, timer=t)
                if kind == "all_reduce"
                else sharded(sim, kind, key, nbytes, ranks, gbs, pg=pg, pg_desc=desc, timer=t),
            )

        grads = grad_mb * 1e6
        dp_group = (*job.dp_group(s), "DATA_PARALLEL_GROUP")
        norm_group = (
            ("0", list(range(n)), "default_pg")
            if dist_opt
            else (pp_name, pp_ranks, "PIPELINE_MODEL_PARALLEL_GROUP")
        )

        batch = batched_p2p and v == 1
        for step in range(steps):
            mb_f = job.work_factors(sim.fixes, sim.rank, step)
            with sim.step(step + 1):
                if s == 0:
                    wl.input_batch(sim, 4 << 20)
                if dp > 1 and grad_mb > 0 and dist_opt:
                    # the parameters the last optimizer step updated, gathered before use
                    yield from reduce(
                        "all_gather", "params", grads, dp_group, "params-all-gather", dp_gbs, model_chunk=0
                    )
                sim.phase = "pipeline"
                # A send waiting to be batched with the next receive from the same peer.
                pending: tuple[int, tuple[Any, ...], str] | None = None

                def flush() -> Generator[Wait, None, None]:
                    nonlocal pending
                    if pending is not None:
                        to, key, name = pending
                        pending = None
                        yield from xfer("send", to, key, name)

                def receive(frm: int, key: tuple[Any, ...], name: str) -> Generator[Wait, None, None]:
                    nonlocal pending
                    if pending is not None and pending[0] % p == frm % p:
                        to, send_key, send_name = pending
                        pending = None
                        yield from exchange(to, send_key, key, (send_name, name))
                        return
                    yield from flush()
                    yield from xfer("recv", frm, key, name)

                def send(to: int, key: tuple[Any, ...], name: str) -> Generator[Wait, None, None]:
                    nonlocal pending
                    yield from flush()
                    if batch:
                        pending = (to, key, name)
                    else:
                        yield from xfer("send", to, key, name)

                for work in order:
                    vs = work.chunk * p + s
                    first, last = vs == 0, vs == p * v - 1
                    ids = {"step": step + 1, "model_chunk": work.chunk, "mb_id": work.mb}
                    # a half microbatch carries half of its microbatch's sequences
                    chunk_us = stage_ms * 1e3 * mb_f[work.mb // 2 if half else work.mb] * share / v
                    # a forward comes from the chunk before and goes to the one after; a backward
                    # the other way; the first (last) chunk has no forward to receive (send)
                    forward = work.kind == "F"
                    name = "forward" if forward else "backward"
                    frm, to = (vs - 1, vs + 1) if forward else (vs + 1, vs - 1)
                    head, tail = (first, last) if forward else (last, first)
                    if not head:
                        yield from receive(frm, (work.kind, step + 1, work.mb, vs), f"{name}-recv")
                    else:
                        yield from flush()
                    _timer_gap(sim, launch_gap_us)
                    start, end = _chunk_kernels(
                        sim, chunk_us, backward=not forward, with_loss=forward and last, annotate=annotate
                    )
                    sim.timer("compute", f"{name}-compute", start, end, **ids)
                    if not tail:
                        yield from send(to, (work.kind, step + 1, work.mb, to), f"{name}-send")
                yield from flush()
                # the drain: this stage is done; the pipeline is not until every stage is
                sim.mark(("pipeline_end", d, step), sim.stream_free[COMPUTE_STREAM])
                sim.phase = "optimizer"
                if loss_dp_sync and dp > 1 and s == p - 1:
                    # the step's loss averaged over the last stage's replicas (for logging): an
                    # all-reduce Megatron does not time, so waiting for a late replica's last
                    # stage is an untimed gap before the next timed op
                    yield from reduce("all_reduce", "loss", 4, dp_group, None, dp_gbs)
                if sequence_parallel and tp > 1:
                    # the layernorm gradients over the TP group, whose members are in step
                    yield from waited(sim, _tp_allreduce(sim, step, 0.001 * grad_mb * 1e6, tp, link_gbs))
                if tied_embeddings and p > 1 and s in (0, p - 1):
                    # the tied input/output embeddings' gradients, between the first and last stage
                    embed = (*job.embedding_group(d), "EMBEDDING_GROUP")
                    yield from reduce(
                        "all_reduce", "embedding", 0.2 * grad_mb * 1e6, embed, "embedding-grads-all-reduce"
                    )
                if dp > 1 and grad_mb > 0:
                    if dist_opt:
                        yield from reduce(
                            "reduce_scatter", "grads", grads, dp_group, "grads-reduce-scatter", dp_gbs,
                            model_chunk=0,
                        )  # fmt: skip
                    else:
                        yield from reduce("all_reduce", "grads", grads, dp_group, "all-grads-sync", dp_gbs)
                # gradient-norm clipping: an all-reduce over the pipeline group (the
                # distributed optimizer's shards: over every rank), then .item()
                yield from reduce("all_reduce", "gradnorm", 4, norm_group, "optimizer-clip-main-grad")
                sim.item()
                opt_f = mean(job.base) if NO_VARIATION in sim.fixes else f
                _timer_gap(sim, launch_gap_us)
                start, end = wl.optimizer_step(sim, stage_ms * 1e3 * 0.2 * opt_f)
                sim.timer("compute", "optimizer", start, end, step=step + 1)
                wl.zero_grad(sim)

    whatifs = job.whatifs()
    return Plan(
        n,
        program,
        {
            "intended": "pipeline_bubble",
            "culprit_ranks": job.slow_ranks(),
            "theoretical_bubble_fraction": round(theoretical_bubble(schedule, p, microbatches, v), 6),
            "compute_factors": [round(x, 6) for x in job.base],
        },
        pg_config=job.pg_config,
        post=drain_bubble,
        whatifs=whatifs.applies,
        intended_whatifs=whatifs.intended,
        whatif_culprits=whatifs.culprits,
        parallel={"pp_size": p, "dp_size": dp, "tp_size": tp, "vpp_size": v},
    )


def _timer_gap(sim: RankSim, gap_us: float) -> None:
    """Before a timed compute op: Megatron's timer synchronizes the device, then the host
    runs ``gap_us`` of Python before the op's first launch (nothing when ``gap_us`` is 0)."""
    if gap_us > 0:
        sim.device_sync()
        sim.idle(sim.jit(gap_us))


def _tp_allreduce(
    sim: RankSim, step: int, nbytes: float, tp: int, link_gbs: float
) -> Generator[Wait, None, tuple[float, float]]:
    """``layernorm-grads-all-reduce``: a ring all-reduce of ``nbytes`` over the rank's
    tensor-parallel group. Its TP peers are not simulated (they do the same work in step),
    so the call is a group of one that takes the transfer time of a group of ``tp``."""
    return comm.collective(
        sim,
        ("layernorm", step),
        coll="allreduce",
        op_name="c10d::allreduce_",
        annotation="nccl:all_reduce",
        kernel_name=wl.ALLREDUCE_KERNEL,
        nelems=int(nbytes // 2),
        dtype="BFloat16",
        ranks=[sim.rank],
        transfer_us=wl.ring_us(nbytes, tp, link_gbs),
        pg=f"tp{sim.rank}",
        pg_desc="TENSOR_MODEL_PARALLEL_GROUP",
        timer=("dp-comm", "layernorm-grads-all-reduce", {"step": step + 1}),
    )


def _chunk_kernels(
    sim: RankSim, chunk_us: float, *, backward: bool, with_loss: bool, annotate: bool
) -> tuple[float, float]:
    """The kernels of one model chunk for one microbatch (two layers' worth), inside a
    ``forward_step`` / ``backward_step`` range when ``annotate``; returns their device span."""
    name = "backward_step" if backward else "forward_step"
    spans = []
    with sim.op(name, cat="user_annotation") if annotate else nullcontext():
        for _ in range(2):
            if backward:
                spans.append(wl.backward_layer(sim, chunk_us / 2))
            else:
                spans.append(wl.forward_layer(sim, chunk_us / 2))
        if with_loss:
            spans.append(wl.loss(sim, 20.0))
    return spans[0][0], spans[-1][1]
