"""Host-side rules: dataloader, sync, late launches (host), and what stays ``other``.

Every trace here is built so that the answer is known: a kernel ends, the device idles
for a known time, and the next kernel's launch and the host's activity are placed around
that gap on purpose.
"""

from __future__ import annotations

import pytest
from rankbuilder import RankBuilder, lost_by_cause

from gpuprof.accounting.rules.hostside import DRAIN_RELAUNCH_US
from gpuprof.accounting.summarize import summarize
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause
from gpuprof.model.timeline import Kind

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_gap_while_host_in_dataloader_is_dataloader() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.host(90, 400, DL)  # the device waits from 100 to 400 in DataLoader
    b.kernel(410, 500, launch_at=400)  # launched right after: 10 us launch latency
    got = lost_by_cause(b.build())
    assert got["dataloader"] == 300
    assert got["host"] == 10
    assert got["other"] == 0
    assert got["compute"] + 310 == got["window"]


def test_late_launch_without_specific_cause_is_host() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.host(100, 350, "aten::relu")  # plain Python/framework work
    b.kernel(360, 500, launch_at=355)
    got = lost_by_cause(b.build())
    assert got["host"] == 260
    assert got["other"] == 0


def test_kernel_already_queued_is_not_host() -> None:
    # The next kernel was launched before the gap began: the device waited for something
    # else (an event on another stream), even though the host was in DataLoader meanwhile.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(400, 500, launch_at=50)
    b.host(100, 390, DL)
    got = lost_by_cause(b.build())
    assert got["other"] == 300
    assert got["host"] == 0 and got["dataloader"] == 0


def test_kernel_held_back_after_its_launch_splits_host_and_other() -> None:
    # Launched 100 us into a 600 us gap, but it only starts 500 us after its launch: the
    # first 100 us + launch + slack are the host's, the rest is waiting on something else.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(700, 800, launch_at=200)  # launch call 200..205
    got = lost_by_cause(b.build())
    assert got["host"] == pytest.approx(205 + 50 - 100)
    assert got["other"] == pytest.approx(700 - 255)


def test_unknown_launch_is_not_blamed_on_the_host() -> None:
    b = RankBuilder()
    b.kernel(0, 100)
    b.kernel(400, 500)  # no launch recorded (correlation not in the trace)
    got = lost_by_cause(b.build())
    assert got["other"] == 300 and got["host"] == 0


def test_unknown_launch_with_dataloader_still_counts_as_dataloader() -> None:
    b = RankBuilder()
    b.kernel(0, 100)
    b.host(150, 350, DL)
    b.kernel(400, 500)
    got = lost_by_cause(b.build())
    assert got["dataloader"] == 200
    assert got["other"] == 100


def test_sync_drains_the_queue_and_the_relaunch_is_sync() -> None:
    b = RankBuilder()
    b.kernel(0, 1000, launch_at=-20)
    b.host(10, 1005, "aten::item")
    b.host(12, 1004, "cudaStreamSynchronize", kind=Kind.RUNTIME)
    b.host(1005, 1100, "aten::add")  # the host issues work again right away
    b.kernel(1110, 1300, launch_at=1100)
    got = lost_by_cause(b.build())
    assert got["sync"] == 110
    assert got["host"] == 0


def test_long_host_work_after_a_sync_is_host() -> None:
    # Scoring rewards in Python for 2 ms after a 1 ms sync returned: without the sync the
    # host would have started scoring 995 µs earlier, beside the kernel, so that much of
    # the gap (plus the relaunch allowance) is the sync's; the rest would starve the device
    # anyway and is host.
    b = RankBuilder()
    b.kernel(0, 1000, launch_at=-20)
    b.host(10, 1005, "cudaStreamSynchronize", kind=Kind.RUNTIME)
    b.host(1005, 3000, "compute_reward", kind=Kind.ANNOTATION)
    b.kernel(3010, 3100, launch_at=3000)
    got = lost_by_cause(b.build())
    assert got["sync"] == (1005 - 10) + DRAIN_RELAUNCH_US
    assert got["host"] == 3010 - 1000 - got["sync"]


def test_gap_after_a_sync_goes_to_sync_as_far_as_removing_it_recovers() -> None:
    # Per layer: a 3 ms kernel, .item() waits for it, then 2 ms of Python before the next
    # launch. Without the sync the Python overlaps the kernel and the device never idles:
    # the whole gap is the sync's (the job replay without syncs agrees; see test_replay).
    b = RankBuilder()
    t = 0.0
    for _ in range(4):
        b.kernel(t + 10, t + 3010, launch_at=t)
        b.host(t + 6, t + 3015, "aten::item")
        b.host(t + 3015, t + 5015, "python_work")
        t += 5015
    got = lost_by_cause(b.build())
    assert got["host"] == pytest.approx(0.0, abs=1.0)
    assert got["sync"] == pytest.approx(got["window"] - got["compute"], abs=1.0)


def test_sync_called_on_an_idle_device_claims_only_its_own_duration() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.host(200, 220, "cudaDeviceSynchronize", kind=Kind.RUNTIME)  # device already idle
    b.kernel(410, 500, launch_at=400)
    got = lost_by_cause(b.build())
    assert got["sync"] == 20
    assert got["host"] == 290


def test_dataloader_beats_sync_inside_a_drained_gap() -> None:
    b = RankBuilder()
    b.kernel(0, 1000, launch_at=-20)
    b.host(10, 1005, "cudaStreamSynchronize", kind=Kind.RUNTIME)  # loss.item() at step end
    b.host(1100, 1500, DL)  # next step fetches its batch
    b.kernel(1610, 1700, launch_at=1600)
    got = lost_by_cause(b.build())
    assert got["dataloader"] == 400
    # 1000..1100 and 1500..1610: the sync's share reaches its length past the gap's start,
    # and the DataLoader wait inside it takes precedence.
    assert got["sync"] == 210
    assert got["host"] == 0


def test_gap_at_window_end_with_no_more_kernels_is_host() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.kernel(10, 600, launch_at=5)
    b.host(600, 1000, "aten::add")
    got = lost_by_cause(b.build())
    assert got["window"] == 1000
    assert got["host"] == 10 + 400  # 10 us before the first kernel, 400 us at the end


def test_only_the_launching_thread_explains_a_late_launch() -> None:
    # A background thread blocks in cudaEventSynchronize across the gap; the main thread
    # (tid 1, which launches the next kernel) is just slow: host, not sync.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.host(50, 400, "cudaEventSynchronize", kind=Kind.RUNTIME, tid=2)
    b.host(50, 400, DL, tid=2)
    b.host(100, 395, "aten::copy_")
    b.kernel(410, 500, launch_at=400)
    got = lost_by_cause(b.build())
    assert got["host"] == 310
    assert got["sync"] == 0 and got["dataloader"] == 0


def test_queued_kernel_behind_a_late_collective_waits_for_the_host() -> None:
    # The compute kernel was queued long ago but depends on an all-reduce that the host
    # launched late: the device waited for the host until the all-reduce started.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(300, 400, launch_at=245, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=20)
    b.kernel(400, 500, launch_at=-10)
    got = lost_by_cause(b.build())
    assert got["host"] == 200
    assert got["communication"] == 100
    assert got["other"] == 0


def test_sync_facts_count_nested_scalar_reads_once() -> None:
    from gpuprof.accounting.summarize import summarize

    b = RankBuilder()
    for i in range(2):
        h0 = i * 1000.0
        b.step(i + 1, h0, h0 + 1000)
        b.kernel(h0 + 10, h0 + 800, launch_at=h0 + 5)
        b.host(h0 + 20, h0 + 810, "aten::item")
        b.host(h0 + 21, h0 + 809, "aten::_local_scalar_dense")
        b.host(h0 + 30, h0 + 805, "cudaStreamSynchronize", kind=Kind.RUNTIME)
    f = summarize(b.build()).facts
    assert f.scalar_reads == 2 and f.scalar_reads_per_step == 1.0
    # One .item() is one blocking call: the calls nested inside it are not counted again.
    assert f.sync_calls_by_name == {"aten::item": 2}
    assert f.sync_wait_us == 2 * 790


def test_launch_still_in_flight_when_the_device_went_idle_is_host() -> None:
    # The launch call began before the gap but returned after it began: the kernel could
    # not be on the device yet. One launched well before is queued (other).
    b = RankBuilder(launch_us=8)
    b.kernel(0, 100, launch_at=-20)
    b.kernel(106, 200, launch_at=95)  # call 95..103
    b.kernel(203, 300, launch_at=150)  # call 150..158: queued 42 us before the gap
    got = lost_by_cause(b.build())
    assert got["host"] == 6
    assert got["other"] == 3


def test_long_queued_gap_inside_a_launch_free_host_op_is_host() -> None:
    # The next kernel was queued before the gap, yet the device idles 5 ms while the
    # launching thread sits in one optimizer op issuing nothing (a sampled trace, or an
    # event the host records late): the device waits on that thread.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(5100, 5200, launch_at=50)
    b.host(80, 5150, "Optimizer.step#Shampoo.step", kind=Kind.ANNOTATION)
    b.host(90, 5090, "aten::_foreach_mul_")
    got = lost_by_cause(b.build())
    assert got["host"] == 5000
    assert got["other"] == 0


def test_long_queued_gap_while_the_host_keeps_launching_stays_other() -> None:
    # Same gap, but the thread launches work every 200 us (to another stream that is not
    # in the trace's window of interest): it is not stuck, the wait is elsewhere.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(5100, 5200, launch_at=50)
    b.host(90, 5090, "aten::_foreach_mul_")
    for t in range(300, 5000, 200):
        b.memset(5300 + t, 5301 + t, launch_at=t)
    s = summarize(b.build())
    host = iv.intersect(s.claims.get(Cause.HOST, iv.empty()), iv.make([100], [5100]))
    assert iv.total(host) == 0


def test_long_queued_gap_inside_a_phase_marker_only_stays_other() -> None:
    # The main thread is only inside ``## backward ##`` (a phase marker: during backward it
    # waits while the autograd thread launches): nothing says the host was busy.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(5100, 5200, launch_at=50)
    b.host(0, 5200, "## backward ##", kind=Kind.ANNOTATION)
    got = lost_by_cause(b.build())
    assert got["host"] == 0
    assert got["other"] == 5000
