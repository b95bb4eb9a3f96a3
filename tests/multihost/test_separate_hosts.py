"""The README's cluster commands on separate hosts (network namespaces, tests/multihost/hosts.py).

A head, two decode hosts and a trainer host, each with its own address: `ray start --head`,
`ray start --address ... --resources '{"decode": 1}'` on each decode host, `shardstream serve
--ray-address` on the head, and `torchrun --nproc-per-node 2` on the trainer. Every rank gets
DistributedSampler's batches; the batch bytes come from the decode hosts, not through the head;
a decode host's link cut mid-epoch and restored, or the host killed, loses and repeats no batch;
with the head's link cut, ranks keep receiving from the decoders. Then `serve` with TLS and a
tokens file: ranks with the CA and a token get exact batches, one without a token Unauthenticated;
`serve` SIGKILLed mid-epoch and started again, the rank goes on by itself; the trainer host lost
mid-epoch, its rank started again from its checkpoint continues exactly (docs/reliability.md,
"On separate hosts").
"""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.datasets import oracle_batches, write_indexed
from tests.multihost.hosts import Host, Network, usable
from tests.multihost.readme_cluster import BIN, Cluster, Secure, secure_files, start_ray

WORKER = Path(__file__).parent.parent / "integration" / "torchrun_worker.py"
PACED = Path(__file__).parent / "paced_rank.py"
CHECKPOINTED = Path(__file__).parent / "checkpointed_rank.py"
# A rank without a token: prints the class of the error it gets and its message.
NO_TOKEN = """
import sys
from shardstream.client import RemoteLoader
try:
    RemoteLoader(sys.argv[1], dataset=sys.argv[2], batch_size=3, world_size=1, rank=0, timeout=60)
except Exception as exc:
    print(exc)
    print(type(exc).__name__)
"""
CUT_S = 5.0
HEAD_CUT_S = 8.0
TRAIN, VAL = [40, 32], [11, 6]
FEATURES = 16384  # 64 kB a row: batch bytes dwarf the head's control traffic
log = logging.getLogger(__name__)

pytestmark = pytest.mark.skipif(usable() is not None, reason=f"no separate hosts here: {usable()}")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The Ray cluster on its hosts, started once for the module; `serve` as the tests want it."""
    root = tmp_path_factory.mktemp("hosts")
    with Network(["head", "decode-a", "decode-b", "trainer"], root) as net:
        yield start_ray(net, root)


@pytest.fixture
def cluster(hosts: Cluster) -> Cluster:
    """The cluster with the README's plaintext `serve`."""
    hosts.use(None)
    return hosts


@pytest.fixture(scope="module")
def secure(hosts: Cluster) -> Secure:
    return secure_files(hosts.root, hosts.net["head"])


@pytest.fixture
def secure_cluster(hosts: Cluster, secure: Secure) -> Cluster:
    """The cluster with `serve --tls-cert --tls-key --auth-tokens-file`; ranks get the CA and a
    token file through the environment."""
    hosts.use(secure)
    return hosts


def _torchrun_epochs(cluster: Cluster, tmp_path: Path) -> dict[str, int]:
    """`torchrun --nproc-per-node 2` on the trainer, two epochs of a train and a validation loader;
    checks every rank's batches against the oracle, and returns the bytes each host sent."""
    train, val, out = tmp_path / "train", tmp_path / "val", tmp_path / "out"
    write_indexed(str(train), TRAIN, features=FEATURES)
    write_indexed(str(val), VAL)
    out.mkdir()
    head, trainer = cluster.net["head"], cluster.net["trainer"]
    before = {h.name: h.sent_bytes() for h in (head, *cluster.decoders)}
    ran = trainer.start([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(WORKER),
                         cluster.address, str(train), str(val), str(out), "full"], "torchrun.log",
                        env=cluster.client_env())
    try:
        assert ran.wait(timeout=240) == 0, (cluster.root / "torchrun.log").read_text()[-4000:]
    except subprocess.TimeoutExpired:
        raise AssertionError((cluster.root / "torchrun.log").read_text()[-4000:]) from None
    sent = {h.name: h.sent_bytes() - before[h.name] for h in (head, *cluster.decoders)}

    for rank in (0, 1):
        record = json.loads((out / f"full-rank{rank}.json").read_text())
        assert record["world"] == 2 and record["steps_sum"] == 2 * record["len"]
        for epoch in (0, 1):
            assert record["epochs"][str(epoch)] == oracle_batches(sum(TRAIN), 2, rank, 3, True, 11, False, epoch)
            assert record["epochs"][f"val{epoch}"] == oracle_batches(sum(VAL), 2, rank, 5, False, 0, False, epoch)
    return sent


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ranks_on_a_trainer_host_pull_exact_batches_from_two_decode_hosts(cluster: Cluster, tmp_path: Path) -> None:
    sent = _torchrun_epochs(cluster, tmp_path)
    delivered = 2 * sum(TRAIN) * FEATURES * 4  # two epochs of the feature column alone
    from_decoders = sent["decode-a"] + sent["decode-b"]
    log.info("bytes sent during the run: %s (train features delivered: %d)", sent, delivered)
    assert from_decoders >= delivered
    assert min(sent["decode-a"], sent["decode-b"]) > delivered / 10  # both decode hosts served
    assert sent["head"] < 0.05 * from_decoders  # the head plans; batch bytes do not pass through it


def _paced(cluster: Cluster, tmp_path: Path, epochs: int, fault: Callable[[], None]) -> dict[str, Any]:
    """A paced rank on the trainer (0.1 s a batch, `epochs` epochs of 75 samples); once it has 4
    batches, `fault()`. Returns its record, what it measured and its log (`log`)."""
    data, out = tmp_path / "data", tmp_path / "out"
    write_indexed(str(data), [40, 35])
    out.mkdir()
    trainer = cluster.net["trainer"]
    log_file = cluster.root / f"paced-{tmp_path.name}.log"
    rank = trainer.start([sys.executable, str(PACED), cluster.address, str(data), str(out), "0.1", str(epochs)],
                         log_file.name, env=cluster.client_env())
    _wait_progress(rank, out / "progress", 4, log_file)
    cut_at = time.monotonic()
    fault()
    assert rank.wait(timeout=180) == 0, log_file.read_text()[-3000:]
    record: dict[str, Any] = json.loads((out / "epoch.json").read_text())
    assert len(record["epochs"]) == epochs
    for epoch, got in enumerate(record["epochs"]):
        assert got == oracle_batches(75, 1, 0, 3, True, 11, False, epoch), epoch
    times = record["times"]
    record["ended_after_cut_s"] = time.monotonic() - cut_at
    record["longest_wait_s"] = max(b - a for a, b in itertools.pairwise(times))
    record["log"] = log_file.read_text()
    return record


def _wait_progress(rank: subprocess.Popen[bytes], progress: Path, batches: int, log_file: Path) -> None:
    deadline = time.monotonic() + 120
    while not (progress.exists() and int(progress.read_text() or 0) >= batches):
        assert rank.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
        time.sleep(0.05)


def _cut(host: Host, seconds: float) -> Callable[[], None]:
    def fault() -> None:
        host.cut()
        time.sleep(seconds)
        host.restore()
    return fault


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_head_cut_mid_epoch_ranks_keep_receiving_from_the_decoders(cluster: Cluster, tmp_path: Path) -> None:
    """The head plans and lists decoders; batches come from the decode hosts. With the head's link
    down for 8 s, the rank finishes its epoch and starts the next one without it."""
    record = _paced(cluster, tmp_path, 2, _cut(cluster.net["head"], HEAD_CUT_S))
    log.info("head cut for %.0f s: 2 epochs ended %.1f s after the cut; longest wait between batches %.2f s",
             HEAD_CUT_S, record["ended_after_cut_s"], record["longest_wait_s"])
    assert record["longest_wait_s"] < 2.0  # never waited on the head


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_decode_host_cut_mid_epoch_and_restored_loses_and_repeats_nothing(cluster: Cluster,
                                                                             tmp_path: Path) -> None:
    record = _paced(cluster, tmp_path, 1, _cut(cluster.net["decode-a"], CUT_S))
    log.info("decode host cut for %.0f s: the epoch ended %.1f s after the cut; longest wait between batches "
             "%.1f s; %d step(s) refetched from the other decoder", CUT_S, record["ended_after_cut_s"],
             record["longest_wait_s"], record["refetched"])
    assert record["longest_wait_s"] < CUT_S + 30  # the rank did not wait out its 120 s timeout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_with_tls_and_tokens_ranks_get_exact_batches_and_a_rank_without_a_token_is_refused(
        secure_cluster: Cluster, tmp_path: Path) -> None:
    """`serve` with --tls-cert/--tls-key (its decoders speak TLS too) and --auth-tokens-file; the
    ranks get the CA and their token file from the environment, as a platform mounts them."""
    sent = _torchrun_epochs(secure_cluster, tmp_path)
    log.info("over TLS with tokens, bytes sent during the run: %s", sent)
    assert sent["head"] < 0.05 * (sent["decode-a"] + sent["decode-b"])
    env = {k: v for k, v in secure_cluster.client_env().items() if k != "SHARDSTREAM_TOKEN_FILE"}
    refused = secure_cluster.net["trainer"].run([sys.executable, "-c", NO_TOKEN, secure_cluster.address,
                                                 str(tmp_path / "train")], timeout=120, env=env)
    assert refused.stdout.strip().splitlines()[-1:] == ["Unauthenticated"], refused.stdout + refused.stderr
    assert "this service wants a token" in refused.stdout
    log.info("a rank without a token: %s", refused.stdout.strip().replace("\n", " / "))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_head_serve_killed_and_restarted_mid_epoch_the_rank_rides_over_it(secure_cluster: Cluster,
                                                                             tmp_path: Path) -> None:
    """`shardstream serve` SIGKILLed mid-epoch (its Ray driver, the decode actors it owns and its
    job registry go with it) and started again with the same command, under TLS and tokens: the
    rank reconnects, opens its job on the new service and goes on at its next batch."""
    cluster = secure_cluster
    restart_s: list[float] = []

    def restart() -> None:
        cluster.kill_serve()
        restart_s.append(cluster.start_serve())

    record = _paced(cluster, tmp_path, 2, restart)
    log.info("serve SIGKILLed and started again (it listed 2 decoders %.1f s after the kill): 2 epochs ended "
             "%.1f s after the kill; longest wait between batches %.1f s; %d decoder stream(s) lost",
             restart_s[0], record["ended_after_cut_s"], record["longest_wait_s"], record["decoders_lost"])
    assert record["decoders_lost"] >= 1  # the rank really lost its decoders with the old serve
    assert f"reconnected to {cluster.address}" in record["log"]  # ... and opened its job on the new one
    assert record["longest_wait_s"] < restart_s[0] + 60  # bounded: not the rank's 120 s timeout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_trainer_host_lost_mid_epoch_and_its_rank_restarted_from_its_checkpoint(secure_cluster: Cluster,
                                                                                  tmp_path: Path) -> None:
    """The trainer host's link cut and every process on it SIGKILLed (the host is lost) mid-epoch,
    then the host back and the rank started again: it loads the checkpoint it wrote (its loader's
    state_dict with its work) and goes on from there. The batches the checkpoint held and those the
    new process received are the oracle's, none lost or repeated across the two runs."""
    cluster = secure_cluster
    data, out = tmp_path / "data", tmp_path / "out"
    write_indexed(str(data), [40, 35])
    out.mkdir()
    trainer = cluster.net["trainer"]
    argv = [sys.executable, str(CHECKPOINTED), cluster.address, str(data), str(out), "0.1", "2"]
    first = trainer.start(argv, "checkpointed-1.log", env=cluster.client_env())
    _wait_progress(first, out / "progress", 8, cluster.root / "checkpointed-1.log")
    trainer.cut()
    trainer.kill()
    assert first.wait(timeout=30) != 0
    time.sleep(1.0)
    trainer.restore()
    restarted_at = time.time()
    second = trainer.start(argv, "checkpointed-2.log", env=cluster.client_env())
    assert second.wait(timeout=180) == 0, (cluster.root / "checkpointed-2.log").read_text()[-3000:]
    record = json.loads((out / "resumed.json").read_text())
    oracle = [oracle_batches(75, 1, 0, 3, True, 11, False, epoch) for epoch in (0, 1)]
    restored, received = record["restored"], record["received"]
    assert record["start_epoch"] == 0 and 8 <= len(restored[0]) < len(oracle[0])  # it resumed mid-epoch
    assert restored[0] == oracle[0][:len(restored[0])]
    assert received == [oracle[0][len(restored[0]):], oracle[1]]  # from that step on, exactly
    first_batch_s = record["first_batch_at"] - restarted_at
    log.info("trainer host lost at batch %d: the restarted rank had its first batch %.2f s after it was started "
             "(%.2f s of interpreter start and imports, %.2f s to join its job, %.2f s to load the checkpoint and "
             "receive the batch)", len(restored[0]), first_batch_s, record["main_at"] - restarted_at,
             record["opened_s"], record["first_batch_at"] - record["main_at"] - record["opened_s"])
    assert first_batch_s < 60


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_decode_host_killed_mid_epoch_loses_and_repeats_nothing(secure_cluster: Cluster, tmp_path: Path) -> None:
    """Every process of a decode host (its raylet, its decode actor) SIGKILLed mid-epoch: the rank
    gets that host's steps from the other one (under TLS and tokens). Last in the module: the host
    stays dead."""
    cluster = secure_cluster
    record = _paced(cluster, tmp_path, 2, cluster.net["decode-b"].kill)
    log.info("decode host killed: 2 epochs ended %.1f s after; longest wait between batches %.1f s; %d step(s) "
             "refetched from the other decoder", record["ended_after_cut_s"], record["longest_wait_s"],
             record["refetched"])
    assert record["longest_wait_s"] < 30  # not the rank's 120 s timeout
    deadline = time.monotonic() + 90  # the kill took: the service drops the host's decoder
    while "1 decoder(s) on 1 node(s)" not in cluster.status():
        assert time.monotonic() < deadline, cluster.status()
        time.sleep(1)
