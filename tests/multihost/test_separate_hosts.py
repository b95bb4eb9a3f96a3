"""The README's cluster commands on separate hosts (network namespaces, tests/multihost/hosts.py).

A head, two decode hosts and a trainer host, each with its own address: `ray start --head`,
`ray start --address ... --resources '{"decode": 1}'` on each decode host, `shardstream serve
--ray-address` on the head, and `torchrun --nproc-per-node 2` on the trainer. Every rank gets
DistributedSampler's batches; the batch bytes come from the decode hosts, not through the head.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from tests.datasets import oracle_batches, write_indexed
from tests.multihost.hosts import Host, Network, usable

BIN = Path(sys.executable).parent
WORKER = Path(__file__).parent.parent / "integration" / "torchrun_worker.py"
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


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_ranks_on_a_trainer_host_pull_exact_batches_from_two_decode_hosts(tmp_path: Path) -> None:
    train, val, out = tmp_path / "train", tmp_path / "val", tmp_path / "out"
    write_indexed(str(train), TRAIN, features=FEATURES)
    write_indexed(str(val), VAL)
    out.mkdir()
    with Network(["head", "decode-a", "decode-b", "trainer"], tmp_path) as net:
        head, trainer = net["head"], net["trainer"]
        decoders = [net["decode-a"], net["decode-b"]]
        _ray_start(head, tmp_path, "--head", "--port=6379", "--num-cpus=0", "--include-dashboard=false")
        for host in decoders:  # one at a time, as Ray wants
            _ray_start(host, tmp_path, f"--address={head.ip}:6379", '--resources={"decode": 1}', "--num-cpus=1")
        address = f"{head.ip}:50051"
        serve = head.start([str(BIN / "shardstream"), "serve", "--host", "0.0.0.0", "--port", "50051",
                            "--ray-address", f"{head.ip}:6379"], "serve.log")
        deadline = time.monotonic() + 120
        while "2 decoder(s) on 2 node(s)" not in _status(trainer, address):
            assert serve.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1)

        before = {h.name: h.sent_bytes() for h in (head, *decoders)}
        env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
        ran = trainer.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(WORKER), address,
                           str(train), str(val), str(out), "full"], timeout=240, env=env, log="torchrun.log")
        assert ran.returncode == 0, (tmp_path / "torchrun.log").read_text()[-4000:]
        sent = {h.name: h.sent_bytes() - before[h.name] for h in (head, *decoders)}

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
