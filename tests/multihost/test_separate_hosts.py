"""The README's cluster commands on separate hosts (network namespaces, tests/multihost/hosts.py).

A head, two decode hosts and a trainer host, each with its own address: `ray start --head`,
`ray start --address ... --resources '{"decode": 1}'` on each decode host, `shardstream serve
--ray-address` on the head, and `torchrun --nproc-per-node 2` on the trainer. Every rank gets
DistributedSampler's batches; the batch bytes come from the decode hosts, not through the head;
a decode host's link cut mid-epoch and restored, or the host killed, loses and repeats no batch;
with the head's link cut, ranks keep receiving from the decoders.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.datasets import oracle_batches, write_indexed
from tests.multihost.hosts import Host, Network, usable

BIN = Path(sys.executable).parent
WORKER = Path(__file__).parent.parent / "integration" / "torchrun_worker.py"
PACED = Path(__file__).parent / "paced_rank.py"
CUT_S = 5.0
HEAD_CUT_S = 8.0
TRAIN, VAL = [40, 32], [11, 6]
FEATURES = 16384  # 64 kB a row: batch bytes dwarf the head's control traffic
OBJECT_STORE = str(80 * 2**20)
log = logging.getLogger(__name__)

pytestmark = pytest.mark.skipif(usable() is not None, reason=f"no separate hosts here: {usable()}")


def _ray_start(host: Host, root: Path, *args: str) -> None:
    temp = f"/tmp/ss-{host.netns[-12:]}"  # Ray's socket paths must stay short
    done = host.run([str(BIN / "ray"), "start", *args, f"--node-ip-address={host.ip}", f"--temp-dir={temp}",
                     f"--object-store-memory={OBJECT_STORE}"], timeout=120,
                    log=f"ray-start-{host.name}.log")
    assert done.returncode == 0, (root / f"ray-start-{host.name}.log").read_text()[-3000:]


def _status(host: Host, address: str) -> str:
    return host.run([str(BIN / "shardstream"), "status", address], timeout=30).stdout


@dataclass
class Cluster:
    net: Network
    root: Path
    address: str  # the service's, on the head

    @property
    def decoders(self) -> list[Host]:
        return [self.net["decode-a"], self.net["decode-b"]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("hosts")
    with Network(["head", "decode-a", "decode-b", "trainer"], root) as net:
        head, trainer = net["head"], net["trainer"]
        _ray_start(head, root, "--head", "--port=6379", "--num-cpus=0", "--include-dashboard=false")
        for host in (net["decode-a"], net["decode-b"]):  # one at a time, as Ray wants
            _ray_start(host, root, f"--address={head.ip}:6379", '--resources={"decode": 1}', "--num-cpus=1")
        address = f"{head.ip}:50051"
        serve = head.start([str(BIN / "shardstream"), "serve", "--host", "0.0.0.0", "--port", "50051",
                            "--ray-address", f"{head.ip}:6379"], "serve.log")
        deadline = time.monotonic() + 120
        while "2 decoder(s) on 2 node(s)" not in _status(trainer, address):
            assert serve.poll() is None and time.monotonic() < deadline, (root / "serve.log").read_text()[-3000:]
            time.sleep(1)
        yield Cluster(net, root, address)


def _env() -> dict[str, str]:
    return {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ranks_on_a_trainer_host_pull_exact_batches_from_two_decode_hosts(cluster: Cluster, tmp_path: Path) -> None:
    train, val, out = tmp_path / "train", tmp_path / "val", tmp_path / "out"
    write_indexed(str(train), TRAIN, features=FEATURES)
    write_indexed(str(val), VAL)
    out.mkdir()
    head, trainer = cluster.net["head"], cluster.net["trainer"]
    before = {h.name: h.sent_bytes() for h in (head, *cluster.decoders)}
    ran = trainer.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(WORKER), cluster.address,
                       str(train), str(val), str(out), "full"], timeout=240, env=_env(), log="torchrun.log")
    assert ran.returncode == 0, (cluster.root / "torchrun.log").read_text()[-4000:]
    sent = {h.name: h.sent_bytes() - before[h.name] for h in (head, *cluster.decoders)}

    for rank in (0, 1):
        record = json.loads((out / f"full-rank{rank}.json").read_text())
        assert record["world"] == 2 and record["steps_sum"] == 2 * record["len"]
        for epoch in (0, 1):
            assert record["epochs"][str(epoch)] == oracle_batches(sum(TRAIN), 2, rank, 3, True, 11, False, epoch)
            assert record["epochs"][f"val{epoch}"] == oracle_batches(sum(VAL), 2, rank, 5, False, 0, False, epoch)
    delivered = 2 * sum(TRAIN) * FEATURES * 4  # two epochs of the feature column alone
    from_decoders = sent["decode-a"] + sent["decode-b"]
    log.info("bytes sent during the run: %s (train features delivered: %d)", sent, delivered)
    assert from_decoders >= delivered
    assert min(sent["decode-a"], sent["decode-b"]) > delivered / 10  # both decode hosts served
    assert sent["head"] < 0.05 * from_decoders  # the head plans; batch bytes do not pass through it


def _paced(cluster: Cluster, tmp_path: Path, epochs: int, cut: Host, cut_s: float,
           fault: str = "cut") -> dict[str, Any]:
    """A paced rank on the trainer (0.1 s a batch, `epochs` epochs of 75 samples); once it has 4
    batches, `cut`'s link down for `cut_s` (fault "cut") or every process on it killed ("kill").
    Returns its record and what it measured."""
    data, out = tmp_path / "data", tmp_path / "out"
    write_indexed(str(data), [40, 35])
    out.mkdir()
    trainer = cluster.net["trainer"]
    rank = trainer.start([sys.executable, str(PACED), cluster.address, str(data), str(out), "0.1", str(epochs)],
                         "paced.log", env=_env())
    progress = out / "progress"
    deadline = time.monotonic() + 120
    while not (progress.exists() and int(progress.read_text() or 0) >= 4):
        assert rank.poll() is None and time.monotonic() < deadline, (cluster.root / "paced.log").read_text()[-3000:]
        time.sleep(0.1)
    cut_at = time.monotonic()
    if fault == "kill":
        cut.kill()
    else:
        cut.cut()
        time.sleep(cut_s)
        cut.restore()
    assert rank.wait(timeout=180) == 0, (cluster.root / "paced.log").read_text()[-3000:]
    record: dict[str, Any] = json.loads((out / "epoch.json").read_text())
    for epoch, got in enumerate(record["epochs"]):
        assert got == oracle_batches(75, 1, 0, 3, True, 11, False, epoch), epoch
    times = record["times"]
    record["ended_after_cut_s"] = time.monotonic() - cut_at
    record["longest_wait_s"] = max(b - a for a, b in itertools.pairwise(times))
    return record


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_head_cut_mid_epoch_ranks_keep_receiving_from_the_decoders(cluster: Cluster, tmp_path: Path) -> None:
    """The head plans and lists decoders; batches come from the decode hosts. With the head's link
    down for 8 s, the rank finishes its epoch and starts the next one without it."""
    record = _paced(cluster, tmp_path, 2, cluster.net["head"], HEAD_CUT_S)
    log.info("head cut for %.0f s: 2 epochs ended %.1f s after the cut; longest wait between batches %.2f s",
             HEAD_CUT_S, record["ended_after_cut_s"], record["longest_wait_s"])
    assert record["longest_wait_s"] < 2.0  # never waited on the head


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_decode_host_cut_mid_epoch_and_restored_loses_and_repeats_nothing(cluster: Cluster,
                                                                             tmp_path: Path) -> None:
    record = _paced(cluster, tmp_path, 1, cluster.net["decode-a"], CUT_S)
    log.info("decode host cut for %.0f s: the epoch ended %.1f s after the cut; longest wait between batches "
             "%.1f s; %d step(s) refetched from the other decoder", CUT_S, record["ended_after_cut_s"],
             record["longest_wait_s"], record["refetched"])
    assert record["longest_wait_s"] < CUT_S + 30  # the rank did not wait out its 120 s timeout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_decode_host_killed_mid_epoch_loses_and_repeats_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """Every process of a decode host (its raylet, its decode actor) SIGKILLed mid-epoch: the rank
    gets that host's steps from the other one. Last in the module: the host stays dead."""
    record = _paced(cluster, tmp_path, 2, cluster.net["decode-b"], 0.0, fault="kill")
    log.info("decode host killed: 2 epochs ended %.1f s after; longest wait between batches %.1f s; %d step(s) "
             "refetched from the other decoder", record["ended_after_cut_s"], record["longest_wait_s"],
             record["refetched"])
    assert record["longest_wait_s"] < 30  # not the rank's 120 s timeout
    deadline = time.monotonic() + 90  # the kill took: the service drops the host's decoder
    while "1 decoder(s) on 1 node(s)" not in _status(cluster.net["trainer"], cluster.address):
        assert time.monotonic() < deadline, _status(cluster.net["trainer"], cluster.address)
        time.sleep(1)
