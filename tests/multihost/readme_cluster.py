"""The README's cluster on separate hosts (tests/multihost/hosts.py), and its `serve`.

`ray start --head` on a head, `ray start --address ... --resources '{"decode": 1}'` on each decode
host, and `shardstream serve --ray-address` on the head, started, killed and started again as a
test wants: plaintext as the README says, or with TLS and a tokens file (`Secure`), whose CA and
token file ranks get through the environment, as a platform mounts them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.certs import Pki, make_pki
from tests.identities import TOKENS, entry, write_tokens_file
from tests.multihost.hosts import Host, Network

BIN = Path(sys.executable).parent
OBJECT_STORE = str(80 * 2**20)
# The decoders the service lists and the nodes they are on, as `shardstream status` counts them
# ("N decoder(s) on N node(s)"), or nothing while it does not answer. A process that imports only
# grpc and the messages: `shardstream status` imports the whole client, torch with it (~2 s a call).
LISTED = """
import sys
import grpc
from shardstream.proto.v1 import loader_pb2 as pb, loader_pb2_grpc as pb_grpc
address, ca, token_file = sys.argv[1:4]
if ca:
    with open(ca, "rb") as f:
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
else:
    channel = grpc.insecure_channel(address)
metadata = [("authorization", "Bearer " + open(token_file).read().strip())] if token_file else []
try:
    status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10, metadata=metadata)
except grpc.RpcError:
    sys.exit()
print(status.decoders, len({d.node_id for d in status.decoder_status}))
"""


def ray_start(host: Host, root: Path, *args: str) -> None:
    temp = f"/tmp/ss-{host.netns[-12:]}"  # Ray's socket paths must stay short
    done = host.run([str(BIN / "ray"), "start", *args, f"--node-ip-address={host.ip}", f"--temp-dir={temp}",
                     f"--object-store-memory={OBJECT_STORE}"], timeout=120,
                    log=f"ray-start-{host.name}.log")
    assert done.returncode == 0, (root / f"ray-start-{host.name}.log").read_text()[-3000:]


@dataclass(frozen=True)
class Secure:
    """The service's TLS files (a certificate for the head's address, which the decoders speak too)
    and its tokens file; the trainer's rank holds `token_file`."""

    pki: Pki
    tokens_file: Path
    token_file: Path


@dataclass
class Cluster:
    net: Network
    root: Path
    address: str  # the service's, on the head
    serve: subprocess.Popen[bytes] | None = None
    secure: Secure | None = None  # when the service speaks TLS and wants tokens
    serve_starts: int = 0

    @property
    def decoders(self) -> list[Host]:
        return [self.net["decode-a"], self.net["decode-b"]]

    def serve_argv(self) -> list[str]:
        """The README's `serve` command (with the TLS and tokens flags when secure)."""
        argv = [str(BIN / "shardstream"), "serve", "--host", "0.0.0.0", "--port", "50051",
                "--ray-address", f"{self.net['head'].ip}:6379"]
        if self.secure is not None:
            argv += ["--tls-cert", self.secure.pki.server_cert, "--tls-key", self.secure.pki.server_key,
                     "--auth-tokens-file", str(self.secure.tokens_file)]
        return argv

    def client_env(self) -> dict[str, str]:
        """A rank's environment: the TLS CA and the token file a platform would mount, when secure."""
        env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
        if self.secure is not None:
            env.update(SHARDSTREAM_CLIENT_TLS_CA_FILE=self.secure.pki.ca,
                       SHARDSTREAM_TOKEN_FILE=str(self.secure.token_file))
        return env

    def status(self) -> str:
        argv = [str(BIN / "shardstream"), "status", self.address]
        if self.secure is not None:
            argv += ["--tls-ca", self.secure.pki.ca, "--token-file", str(self.secure.token_file)]
        return self.net["trainer"].run(argv, timeout=30).stdout

    def listed(self) -> str:
        """The decoders the service lists and their nodes ("2 2"), asked from the trainer host; ""
        while it does not answer."""
        secure = [self.secure.pki.ca, str(self.secure.token_file)] if self.secure is not None else ["", ""]
        return self.net["trainer"].run([sys.executable, "-c", LISTED, self.address, *secure],
                                       timeout=30).stdout.strip()

    def start_serve(self, decoders: int = 2) -> float:
        """`serve` on the head, as the README says; returns the seconds until the service listed
        `decoders` decoders."""
        self.serve_starts += 1
        log_name = f"serve-{self.serve_starts}.log"
        started = time.monotonic()
        self.serve = self.net["head"].start(self.serve_argv(), log_name)
        deadline = started + 120
        while self.listed() != f"{decoders} {decoders}":
            assert self.serve.poll() is None and time.monotonic() < deadline, \
                (self.root / log_name).read_text()[-3000:]
            time.sleep(0.2)
        return time.monotonic() - started

    def kill_serve(self) -> None:
        """SIGKILL the `serve` process (and its process group): no goodbye, its job registry gone."""
        assert self.serve is not None
        try:
            os.killpg(self.serve.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.serve.wait(timeout=30)

    def use(self, secure: Secure | None) -> None:
        """Serve plaintext (None) or with TLS and tokens: `serve` stopped (SIGTERM) and started
        again with the other flags when it runs with others."""
        if self.secure == secure and self.serve is not None:
            return
        if self.serve is not None:
            self.serve.terminate()
            self.serve.wait(timeout=60)
        self.secure = secure
        self.start_serve()


def secure_files(root: Path, head: Host) -> Secure:
    pki = make_pki(root / "pki", ips=[head.ip])
    tokens_file, token_file = root / "tokens.json", root / "trainer.token"
    write_tokens_file(tokens_file, {"trainer": entry(TOKENS["team-a"]), "ops": entry(TOKENS["ops"], admin=True)})
    token_file.write_text(TOKENS["team-a"])
    return Secure(pki, tokens_file, token_file)


def start_ray(net: Network, root: Path) -> Cluster:
    """The Ray cluster: the head, then each decode host, one at a time as Ray wants; no `serve` yet."""
    head = net["head"]
    ray_start(head, root, "--head", "--port=6379", "--num-cpus=0", "--include-dashboard=false")
    for host in (net["decode-a"], net["decode-b"]):
        ray_start(host, root, f"--address={head.ip}:6379", '--resources={"decode": 1}', "--num-cpus=1")
    return Cluster(net, root, f"{head.ip}:50051")


__all__ = ["BIN", "Cluster", "Secure", "ray_start", "secure_files", "start_ray"]
