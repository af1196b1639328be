"""Device-side rules: exposed communication, exposed copies/memsets, and the allocator."""

from __future__ import annotations

from rankbuilder import RankBuilder, lost_by_cause

from gpuprof.model.timeline import Kind, MemorySample


def test_collective_overlapped_by_compute_is_only_partly_exposed() -> None:
    b = RankBuilder()
    b.kernel(0, 150, launch_at=-20)
    b.kernel(100, 300, launch_at=-10, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=20)
    b.kernel(300, 400, launch_at=-5)
    got = lost_by_cause(b.build())
    assert got["communication"] == 150
    assert got["compute"] == 250


def test_point_to_point_counts_as_communication() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.kernel(100, 180, launch_at=-10, name="ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", stream=20)
    b.kernel(180, 200, launch_at=-5)
    assert lost_by_cause(b.build())["communication"] == 80


def test_exposed_copy_and_memset_are_memory_hidden_copy_is_not() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-30)
    b.copy(100, 160, "Memcpy HtoD (Pageable -> Device)", launch_at=-20, nbytes=1 << 20)
    b.memset(160, 170, launch_at=-15)
    b.copy(170, 260, launch_at=-10, stream=9)  # pinned copy beside a kernel
    b.kernel(170, 300, launch_at=-5)
    got = lost_by_cause(b.build())
    assert got["memory"] == 70
    assert got["other"] == 0


def test_copy_beats_dataloader_by_precedence() -> None:
    # The input batch copy runs while the host is still in DataLoader: memory wins.
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-30)
    b.host(100, 400, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    b.copy(300, 400, "Memcpy HtoD (Pageable -> Device)", launch_at=295)
    b.kernel(410, 500, launch_at=400)
    got = lost_by_cause(b.build())
    assert got["memory"] == 100
    assert got["dataloader"] == 200
    assert got["host"] == 10


def test_host_in_cudamalloc_while_device_waits_is_memory() -> None:
    b = RankBuilder()
    b.kernel(0, 100, launch_at=-20)
    b.host(120, 320, "cudaMalloc", kind=Kind.RUNTIME)
    b.kernel(330, 400, launch_at=325)
    got = lost_by_cause(b.build())
    assert got["memory"] == 200
    assert got["host"] == 30


def test_cudafree_drains_the_device_like_a_sync() -> None:
    b = RankBuilder()
    b.kernel(0, 1000, launch_at=-20)
    b.host(500, 1050, "cudaFree", kind=Kind.RUNTIME)  # waits for the device, then frees
    b.kernel(1200, 1300, launch_at=1150)
    got = lost_by_cause(b.build())
    assert got["memory"] == 200
    assert got["host"] == 0


def test_memory_facts_from_samples_and_copies() -> None:
    from gpuprof.accounting.summarize import summarize

    b = RankBuilder()
    b.kernel(0, 100, launch_at=-30)
    b.copy(100, 160, "Memcpy HtoD (Pageable -> Device)", launch_at=-20, nbytes=3 << 20)
    b.copy(160, 200, "Memcpy DtoH (Device -> Pinned)", launch_at=-15)
    b.host(200, 260, "cudaMalloc", kind=Kind.RUNTIME)
    b.kernel(270, 300, launch_at=262)
    samples = (MemorySample(0, 60 << 30, 75 << 30), MemorySample(10, 40 << 30, 70 << 30))
    s = summarize(b.build(memory=samples, device_memory_bytes=80 << 30))
    f = s.facts
    assert f.pageable_copies == 1 and f.pageable_copy_bytes == 3 << 20
    assert f.exposed_copy_us_by_kind == {"HtoD": 60.0, "DtoH": 40.0}
    assert f.alloc_calls_by_name == {"cudaMalloc": 1} and f.alloc_time_us == 60
    assert f.mem_peak_reserved_bytes == 75 << 30
    assert f.mem_peak_share == 75 / 80
    assert f.local_lost_us_by_rule["exposed_copies"] == 100
    assert f.local_lost_us_by_rule["allocator"] == 60
