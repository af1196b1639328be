"""Advice for distributed jobs: stragglers, pipeline bubbles and imbalance, communication.

Every estimate follows :mod:`gpuprof.advice.savings`: the job's step time is the slowest
rank's, and a fix saves what it takes off that. Recommendation ids are stable:

``straggler-rank``        named slow ranks that the others wait for in collectives (or at
                          barriers of op-level timelines); estimate: the critical-path gain,
                          i.e. each collective the rank is last at ends sooner by its margin
                          over the next-latest member, on every rank
``straggler-rotating``    a different rank is last at each collective (data-dependent
                          imbalance): no one rank is named
``straggler-absent-rank`` ranks wait in collectives for a rank that is not in the input
``pipeline-imbalance``, ``pipeline-bubble``: see :mod:`gpuprof.advice.pipeline`
``communication-slow-collectives`` collectives far slower than their bytes need at link
                          speed: waiting for ranks not in the input, or a slow transport
``straggler-link``, ``straggler-collective``, ``straggler-host``: one pipeline link, one
                          group's collectives, one rank's host slower than its peers (see
                          :mod:`gpuprof.advice.distributed.slowpaths`)
``comm-overlap``          exposed collectives that hardly overlap compute
``exposed-communication`` exposed collectives that already overlap but still cost time, or
                          of an inference job (tensor-parallel collectives on the critical path)

The advisors live by job: ``stragglers`` (with ``slowranks``: ranks slower than their peers,
and ``barriers``: ranks late at the barriers of an op-level timeline), ``collectives``
(slow collectives, and what every communication finding measures of them) and
``communication`` (exposed collectives, inference). Each returns findings, which the
phrasebook words (:mod:`gpuprof.advice.phrasebook`). Importing this package registers them.
"""

from __future__ import annotations

from gpuprof.advice.distributed.collectives import slow_collectives_advice
from gpuprof.advice.distributed.communication import LOW_OVERLAP, communication_advice
from gpuprof.advice.distributed.slowpaths import slow_path_advice
from gpuprof.advice.distributed.slowranks import MIN_SAVINGS_PCT, slow_rank_advice
from gpuprof.advice.distributed.stragglers import straggler_advice

__all__ = [
    "LOW_OVERLAP",
    "MIN_SAVINGS_PCT",
    "communication_advice",
    "slow_collectives_advice",
    "slow_path_advice",
    "slow_rank_advice",
    "straggler_advice",
]
