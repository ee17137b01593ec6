"""All-reduce correctness without Mininet: schedules, the pipelined executor over socket pairs, and
whole jobs of rank processes over loopback TCP (2-8 ranks, every algorithm, odd sizes)."""

from __future__ import annotations

import socket
import statistics
import threading

import numpy as np
import pytest

from wire import faultsfile
from workloads.allreduce.data import count_wrong, expected_sum, rank_data, workload
from workloads.allreduce.executor import Executor, cut
from workloads.allreduce.job import JobSpec, run_job
from workloads.allreduce.launcher import AllReduceJob, SizeResult, rail_rates, size_range
from workloads.allreduce.schedule import (
    ALGORITHMS,
    NET_CHANNEL,
    algorithms,
    algorithms_for,
    bytes_sent,
    channels_for,
    schedule,
    split,
)
from workloads.allreduce.tuner import (
    CANDIDATE_CHUNKS,
    CANDIDATE_SPLITS,
    TunerCache,
    candidates,
    grid,
    search,
    tune,
)
from workloads.hosts import Endpoint, JobError, LocalSpawner, local_endpoints, parse_size


def run_in_threads(algo: str, n: int, count: int, chunk: int, seed: int = 3, local: int = 1,
                   collective: str = "allreduce", split: float = 0.0, rails: list[float] | None = None,
                   ) -> list[np.ndarray]:
    pairs = {}
    for a in range(n):
        for b in range(a + 1, n):
            for c in [*range(channels_for(local)), *([NET_CHANNEL] if a // local == b // local else [])]:
                pairs[(a, b, c)], pairs[(b, a, c)] = socket.socketpair()
    bufs = [workload(collective, count, seed, n, r).initial.copy() for r in range(n)]

    def rank(r: int) -> None:
        ops = schedule(algo, n, r, count, local, collective, split, rails)
        conns = {(p, c): pairs[(r, p, c)] for p, c in {(op.peer, op.channel) for op in ops}}
        Executor(cut(ops, chunk), conns, chunk).run(bufs[r])

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in pairs.values():
        s.close()
    return bufs


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("n", range(2, 9))
def test_every_algorithm_sums_exactly_for_odd_sizes(algo, n):
    for count, chunk in ((1, 1), (7, 2), (1001, 64), (12345, 1000)):  # not divisible by n or chunk
        expected = expected_sum(count, 3, n)
        for r, buf in enumerate(run_in_threads(algo, n, count, chunk)):
            assert count_wrong(buf, expected) == 0, (algo, n, count, chunk, r)


@pytest.mark.parametrize("algo", ["rings", "hier", "hier-serial"])
@pytest.mark.parametrize(("servers", "local"), [(1, 2), (2, 2), (3, 2), (2, 3), (2, 4), (3, 3), (4, 1)])
def test_server_aware_algorithms_sum_exactly_on_every_layout(algo, servers, local):
    n = servers * local
    for count, chunk in ((1, 1), (7, 2), (1001, 64), (12345, 1000)):
        expected = expected_sum(count, 3, n)
        for r, buf in enumerate(run_in_threads(algo, n, count, chunk, local=local)):
            assert count_wrong(buf, expected) == 0, (algo, servers, local, count, chunk, r)


@pytest.mark.parametrize(("collective", "algo"), [(c, a) for c in ("allgather", "reducescatter", "alltoall")
                                                  for a in algorithms(c)])
@pytest.mark.parametrize(("servers", "local"), [(1, 2), (2, 2), (3, 2), (2, 3), (2, 4), (4, 1), (5, 1)])
def test_every_collective_is_exact_on_every_layout(collective, algo, servers, local):
    n = servers * local
    for count, chunk in ((1, 1), (7, 2), (1001, 64), (12345, 1000)):  # not divisible by n or chunk
        bufs = run_in_threads(algo, n, count, chunk, local=local, collective=collective)
        for r, buf in enumerate(bufs):
            assert workload(collective, count, 3, n, r).wrong(buf) == 0, (collective, algo, servers, local, count, r)


@pytest.mark.parametrize(("collective", "algo"), [("allreduce", "hier"), ("allreduce", "rings"),
                                                  ("allreduce", "ring"), ("allgather", "hier"),
                                                  ("reducescatter", "hier"), ("alltoall", "pxn")])
@pytest.mark.parametrize("share", [0.25, 1.0])
def test_the_nvlink_net_split_stays_exact(collective, algo, share):
    for servers, local in ((2, 2), (2, 4), (3, 3)):
        n = servers * local
        for count, chunk in ((7, 2), (12345, 1000)):
            bufs = run_in_threads(algo, n, count, chunk, local=local, collective=collective, split=share)
            for r, buf in enumerate(bufs):
                assert workload(collective, count, 3, n, r).wrong(buf) == 0, (collective, algo, local, count, r)


def test_the_split_sends_its_share_of_a_servers_internal_bytes_through_the_nics():
    servers, local, count = 2, 4, 80_000
    n = servers * local
    for r in range(n):
        whole = schedule("hier", n, r, count, local)
        for share in (0.0, 0.25, 0.5):
            ops = schedule("hier", n, r, count, local, split=share)
            inside = [op for op in whole if op.peer // local == r // local]
            net = [op for op in ops if op.channel == NET_CHANNEL]
            assert sum(op.count for op in net) == pytest.approx(share * sum(op.count for op in inside), rel=0.01)
            assert all(op.peer // local == r // local for op in net)  # only a server's internal transfers
            assert sum(op.count for op in ops) == sum(op.count for op in whole)  # nothing lost or doubled
    assert schedule("hier", n, 0, count, local, split=0.0) == schedule("hier", n, 0, count, local)
    with pytest.raises(ValueError, match="split: .* within 0..1, got 1.5"):
        schedule("hier", n, 0, count, local, split=1.5)


def test_hier_sized_by_rail_is_exact_and_a_slow_rail_carries_its_share():
    for servers, local, rails in ((2, 2, [1.0, 0.5]), (3, 4, [1.0, 1.0, 0.5, 1.0]), (2, 3, [0.2, 1.0, 0.7])):
        n = servers * local
        for count, chunk in ((7, 2), (12345, 1000)):
            for algo in ("hier", "hier-serial"):
                expected = expected_sum(count, 3, n)
                for r, buf in enumerate(run_in_threads(algo, n, count, chunk, local=local, rails=rails)):
                    assert count_wrong(buf, expected) == 0, (algo, local, rails, count, r)
        count = 120_000
        for r in range(n):  # through the NIC: 2(N-1)/N of the share rail r % local carries
            sent = bytes_sent(schedule("hier", n, r, count, local, rails=rails))
            fabric = sum(b for peer, b in sent.items() if peer // local != r // local)
            share = count * rails[r % local] / sum(rails)
            assert fabric == pytest.approx(2 * (servers - 1) / servers * share * 4, rel=0.01), (rails, r)
    with pytest.raises(ValueError, match="rails: only the hierarchical all-reduce"):
        schedule("rings", 4, 0, 100, 2, rails=[1, 1])
    with pytest.raises(ValueError, match="rails: give a positive rate for each of the 2 rails"):
        schedule("hier", 4, 0, 100, 2, rails=[1, 0])


def test_rail_rates_come_from_each_gpus_sends_to_other_servers():
    # rank, step, send, peer, bytes, start, end, compute: 2 servers x 2 GPUs; rail 1 half as fast
    steps = [[0, 0, True, 2, 1000, 0.0, 1.0, 0], [2, 0, True, 0, 1000, 0.0, 1.0, 0],
             [1, 0, True, 3, 1000, 0.0, 2.0, 0], [3, 0, True, 1, 1000, 0.0, 1.9, 0],
             [0, 1, True, 1, 9999, 0.0, 0.1, 0]]  # over NVLink: not a rail's
    result = SizeResult(4000, "hier", 1000, 4, [1.0], 0, steps)
    assert rail_rates(result, 2) == [1000.0, 500.0]
    with pytest.raises(JobError, match="every rail"):
        rail_rates(SizeResult(4000, "hier", 1000, 4, [1.0], 0, steps[:2]), 2)


def test_a_collective_that_did_not_run_is_wrong():
    """The checks can fail: the untouched buffers are wrong wherever another rank's data belongs."""
    for collective in ("allgather", "reducescatter", "alltoall"):
        w = workload(collective, 1000, 3, 4, 1)
        assert w.wrong(w.initial) > 100, collective


def test_hierarchical_collectives_and_pxn_keep_the_nics_and_spines_for_what_must_cross():
    servers, local, count = 3, 4, 12000
    n = servers * local

    def fabric_peers(collective: str, algo: str, r: int) -> dict[int, int]:  # to other servers: the NIC
        sent = bytes_sent(schedule(algo, n, r, count, local, collective))
        return {peer: b for peer, b in sent.items() if peer // local != r // local}

    for r in range(n):
        for collective in ("allgather", "reducescatter"):  # hier: (N-1) segments through the NIC, the ring n-1
            assert sum(fabric_peers(collective, "hier", r).values()) == (servers - 1) * count // n * 4
        # pxn: every block for another server leaves on this GPU's rail (none crosses rails, so no spine)
        pxn = fabric_peers("alltoall", "pxn", r)
        assert all(peer % local == r % local for peer in pxn)
        assert sum(pxn.values()) == (n - local) * (count // n) * 4  # as much as pairwise, on one rail
        assert any(peer % local != r % local for peer in fabric_peers("alltoall", "pairwise", r))


def test_hier_sends_each_nic_2_n_minus_1_over_n_of_a_gpus_share_and_rings_cross_on_one_rail():
    servers, local, count = 2, 4, 8000
    n = servers * local

    def fabric_bytes(algo: str, r: int) -> int:  # to GPUs of other servers: through the NIC
        sent = bytes_sent(schedule(algo, n, r, count, local))
        return sum(b for peer, b in sent.items() if peer // local != r // local)

    for r in range(n):
        assert fabric_bytes("hier", r) == 2 * (servers - 1) * count // local // servers * 4
        assert fabric_bytes("ring", 3) == 2 * (n - 1) * count // n * 4  # the flat ring's crossing rank: all of it
        crossings = {peer for peer in bytes_sent(schedule("rings", n, r, count, local)) if peer // local != r // local}
        assert all(peer % local == r % local for peer in crossings)  # rail-aware: to the same GPU index
    assert sum(fabric_bytes("rings", r) for r in range(n)) == sum(fabric_bytes("ring", r) for r in range(n))
    with pytest.raises(ValueError, match="local: 3 GPUs per server"):
        schedule("hier", 8, 0, 10, local=3)
    assert algorithms_for(1) == ("ring", "tree", "hd") and "hier" in algorithms_for(4)


def test_hier_serial_waits_for_the_whole_phase_before_and_hier_for_its_chunk_only():
    count, chunk, local = 8000, 500, 2

    def first_net_send_deps(algo: str) -> list[int]:
        pieces = cut(schedule(algo, 4, 0, count, local), chunk)
        first = next(p for p in pieces if p.op.phase == 1 and p.op.send)
        return [pieces[d].op.phase for d in first.deps]

    assert first_net_send_deps("hier") == [0]  # the NVLink reduce of its own chunk
    assert len(first_net_send_deps("hier-serial")) == 2 * count // local // chunk  # every NVLink piece


def test_a_wrong_element_is_counted():
    expected = expected_sum(100, 1, 4)
    broken = expected.copy()
    broken[17] += 0.25
    assert count_wrong(broken, expected) == 1
    assert count_wrong(expected.copy(), expected) == 0


def test_data_depend_on_seed_and_rank_and_sums_are_exact():
    a, b = rank_data(1000, 1, 0), rank_data(1000, 1, 1)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, rank_data(1000, 2, 0))
    assert np.array_equal(a, rank_data(1000, 1, 0))
    total = sum(rank_data(1000, 1, r).astype(np.float64) for r in range(5))
    assert np.array_equal(total.astype(np.float32), expected_sum(1000, 1, 5))


def test_ring_sends_2_n_minus_1_over_n_of_the_buffer():
    n, count = 8, 8000
    for r in range(n):
        sent = bytes_sent(schedule("ring", n, r, count))
        assert sent == {(r + 1) % n: 2 * (n - 1) * count // n * 4}


def test_halving_doubling_sends_the_same_volume_as_the_ring_for_a_power_of_two():
    n, count = 8, 8000
    for r in range(n):
        assert sum(bytes_sent(schedule("hd", n, r, count)).values()) == 2 * (n - 1) * count // n * 4


def test_a_send_waits_for_the_reduction_of_its_chunk_only():
    pieces = cut(schedule("ring", 4, 0, 400), 50)
    # step 1 sends segment 3, reduced in step 0 from rank 3: its first chunk waits for that chunk alone
    first_step1_send = next(i for i, p in enumerate(pieces) if p.op.step == 1 and p.op.send)
    (dep,) = pieces[first_step1_send].deps
    assert pieces[dep].op.step == 0 and not pieces[dep].op.send
    assert (pieces[dep].start, pieces[dep].stop) == (pieces[first_step1_send].start, pieces[first_step1_send].stop)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="algo"):
        schedule("butterfly", 4, 0, 10)
    with pytest.raises(ValueError, match="rank 4"):
        schedule("ring", 4, 4, 10)
    with pytest.raises(ValueError, match="size"):
        parse_size("8X")
    with pytest.raises(JobError, match="algo"):
        JobSpec(local=2, algo="nope").check()
    with pytest.raises(JobError, match="size"):
        JobSpec(local=2, sizes=[10]).check()
    with pytest.raises(JobError, match="cc"):
        JobSpec(local=2, cc="no-such-cc").check()


def test_sizes_and_split():
    assert parse_size("8M") == 8 << 20 and parse_size("64K") == 65536 and parse_size("1000") == 1000
    assert size_range(1 << 20, 8 << 20, 2) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert split(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]


def test_busbw_is_algbw_times_2_n_minus_1_over_n():
    r = SizeResult(8 << 20, "ring", 1 << 20, 8, [1.0, 1.0], 0)
    assert r.algbw_gbs == pytest.approx((8 << 20) / 1e9)
    assert r.busbw_gbs == pytest.approx(r.algbw_gbs * 14 / 8)


def test_tuner_candidates_and_cache(tmp_path):
    assert candidates(100 << 10, ("ring",), (64 << 10, 256 << 10, 1 << 20)) == [("ring", 64 << 10), ("ring", 100 << 10)]
    cache = TunerCache(tmp_path / "c.json")
    assert cache.get("k", 8) is None
    cache.put("k", 8, {"algo": "hd", "chunk_bytes": 4})
    assert TunerCache(tmp_path / "c.json").get("k", 8)["algo"] == "hd"


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_rank_processes_over_loopback(algo, tmp_path):
    """Real rank processes, TCP over loopback, a size divisible by neither the world nor the chunk."""
    for n in (2, 3, 8):
        spec = JobSpec(local=n, sizes=[4 * 100_003], algo=algo, chunk_bytes=4 * 9_999, iters=2, name=f"t{n}")
        outcome = run_job(spec, progress=None, workdir=tmp_path / f"{algo}{n}")
        assert outcome.wrong == 0
        (result,) = outcome.results
        assert len(result.times_s) == 2 and all(t > 0 for t in result.times_s)
        assert {s[0] for s in result.steps} == set(range(n))  # every rank reported its step timings
        assert (tmp_path / f"{algo}{n}" / "results.json").exists()


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "alltoall"])
def test_other_collectives_as_rank_processes_over_loopback(collective, tmp_path):
    """The ranks take the collective from the launcher and check their own part; the table says it."""
    spec = JobSpec(local=5, sizes=[4 * 100_003], collective=collective, algo=algorithms(collective)[0],
                   chunk_bytes=4 * 9_999, iters=1, name=collective)
    outcome = run_job(spec, progress=None, workdir=tmp_path / collective)
    assert outcome.wrong == 0
    (result,) = outcome.results
    assert result.collective == collective and result.busbw_gbs == pytest.approx(result.algbw_gbs * 4 / 5)
    assert f"# collective: {collective}" in outcome.table
    with pytest.raises(JobError, match=f"algo: 'tree' is not a {collective} algorithm"):
        JobSpec(local=2, collective=collective, algo="tree").check()


def test_gpus_of_servers_as_rank_processes_over_loopback_with_the_split(tmp_path):
    """Two servers of two GPUs on loopback (NVLink addresses 127.0.1.x): each pair of a server keeps
    its NVLink channels and one through the NICs, and a split run over both is exact."""
    endpoints = [Endpoint(f"g{i}", "127.0.0.1", server=f"srv{i // 2}", nvlink=f"127.0.1.{i + 1}") for i in range(4)]
    with AllReduceJob(endpoints, LocalSpawner(), tmp_path, name="servers") as job:
        assert job.local == 2
        for algo, split in (("hier", 0.0), ("hier", 0.5), ("rings", 0.25)):
            result = job.measure(4 * 50_001, algo=algo, chunk_bytes=4 * 4_999, iters=1, warmup=0, split=split)
            assert result.wrong == 0 and result.label == (f"{algo}+{split:.0%}net" if split else algo)
        rates = rail_rates(result_hier := job.measure(4 * 50_001, algo="hier", iters=1, warmup=0), 2)
        assert result_hier.wrong == 0 and len(rates) == 2 and min(rates) > 0
        weighted = job.measure(4 * 50_001, algo="hier", iters=1, warmup=0, rails=[1.0, 0.25])
        assert weighted.wrong == 0 and weighted.label == "hier/rails"
        with pytest.raises(JobError, match="split: must be within 0..1"):
            job.measure(4000, algo="hier", split=-0.1)


def test_the_search_finds_a_grids_best_in_under_a_fifth_of_its_trials():
    """On a recorded grid (here a made-up cost with its optimum at hier, 1M, split 25%), the
    coordinate descent finds the optimum and measures <= 20% of the grid."""
    size = 16 << 20
    algos = algorithms_for(4)
    configs = grid(size, algos, CANDIDATE_CHUNKS, CANDIDATE_SPLITS)
    cost = {c: 1.0 + algos.index(c.algo) * 0.1 + abs(CANDIDATE_CHUNKS.index(c.chunk_bytes) - 2) * 0.05
            + abs(c.split - 0.25) * 0.3 for c in configs}
    cost = {c: t - (0.5 if c.algo == "hier" else 0.0) for c, t in cost.items()}
    asked: list = []

    def recorded(config):
        asked.append(config)
        return cost[config]

    best = search(size, algos, CANDIDATE_CHUNKS, CANDIDATE_SPLITS, recorded)
    assert best == min(cost, key=cost.__getitem__) == best.__class__("hier", 1 << 20, 0.25)
    assert len(set(asked)) == len(asked) <= 0.2 * len(configs) == 16


def test_the_tuner_tries_part_of_the_grid_and_exhaustive_all_of_it(tmp_path):
    endpoints = [Endpoint(f"g{i}", "127.0.0.1", server=f"srv{i // 2}", nvlink=f"127.0.1.{i + 1}") for i in range(4)]
    size = 64 << 10  # every candidate chunk collapses into the message: the grid is algorithms x splits
    cache = TunerCache(tmp_path / "cache.json")
    with AllReduceJob(endpoints, LocalSpawner(), tmp_path, name="tuned") as job:
        found, tried = tune(job, size, "k", cache, tmp_path, iters=1)
        algos = algorithms_for(2)
        assert len(grid(size, algos, CANDIDATE_CHUNKS, CANDIDATE_SPLITS)) == len(algos) * 4 == 20
        assert len(algos) <= len(tried) <= len(algos) + 3  # each algorithm once, then the split while it helps
        assert {r.algo for r in tried} == set(algos) and all(r.wrong == 0 for r in tried)
        fastest = min(tried, key=lambda r: r.time_s)
        assert (found.algo, found.split) == (fastest.algo, fastest.split)
        assert cache.get("k", size)["trials"] == len(tried)
        _, everything = tune(job, size, "k2", cache, tmp_path, iters=1, collective="alltoall", exhaustive=True)
        assert len(everything) == 2 * 4 and {(r.algo, r.split) for r in everything} == {
            (a, s) for a in ("pairwise", "pxn") for s in (0.0, *CANDIDATE_SPLITS)}
    assert "trials of the 8 in the grid" in (tmp_path / "tuner-alltoall-64K.md").read_text()


def test_a_compute_delay_on_one_host_lengthens_its_ranks_own_work_in_the_step_timings(tmp_path):
    """The slow-host fault: the rank on local1 follows its faults file; its received steps' own work
    (the 8th field of a step) takes the delay longer, its peers' does not."""
    faultsfile.write(tmp_path / "local1.faults.json", {"compute_delay_ms": 80})
    with AllReduceJob(local_endpoints(3), LocalSpawner(), tmp_path, name="slow",
                      faults_file=lambda host: tmp_path / f"{host}.faults.json") as job:
        result = job.measure(4 * 3000, iters=1, warmup=1)
    assert result.wrong == 0
    work = {rank: [s[7] for s in result.steps if s[0] == rank and not s[2]] for rank in range(3)}
    assert len(work[1]) == 4 and all(w >= 0.08 for w in work[1])
    assert statistics.median(work[0] + work[2]) < 0.04


def test_auto_tunes_once_then_uses_the_cache(tmp_path):
    spec = JobSpec(local=3, sizes=[64 << 10], algo="auto", iters=1, tuner_cache=tmp_path / "cache.json",
                   tuner_iters=1)
    first = run_job(spec, progress=None, workdir=tmp_path / "a")
    assert first.wrong == 0 and not first.picks[64 << 10]["cached"]
    assert (tmp_path / "a" / "tuner-64K.md").exists()
    second = run_job(spec, progress=None, workdir=tmp_path / "b")
    assert second.picks[64 << 10]["cached"]
    assert second.picks[64 << 10]["algo"] == first.picks[64 << 10]["algo"]
