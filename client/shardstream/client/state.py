"""The loader's checkpoint: small, picklable and the same on every rank.

State = (epoch, global cursor, seed, spec fingerprint, global batch size,
dataset fingerprint, and the job's reproducibility manifest). The cursor counts samples the whole job consumed this
epoch (steps x world size x batch size), so a checkpoint written by rank 0
resumes every rank, and it resumes a job whose world size changed as long as
world_size x batch_size stays the same: global batch k is the same slice of
the epoch's order either way (see docs/reliability.md).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from shardstream.client import manifest_diff
from shardstream.proto.errors import CheckpointMismatch
from shardstream.proto.job_options import fingerprint
from shardstream.proto.v1 import loader_pb2 as pb

log = logging.getLogger(__name__)

STATE_VERSION = 1


@dataclass(frozen=True)
class LoaderState:
    epoch: int
    global_cursor: int
    seed: int
    spec_fingerprint: str
    global_batch_size: int
    dataset_fingerprint: str
    manifest: dict[str, Any] | None = None  # the job's reproducibility manifest (manifest_diff.py)

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise CheckpointMismatch(f"not a shardstream loader state of version {STATE_VERSION}: {state!r}")
        try:
            loaded = cls(**{k: v for k, v in state.items() if k != "version"})
        except TypeError as exc:
            raise CheckpointMismatch(f"loader state has the wrong fields: {exc}") from None
        if loaded.epoch < 0 or loaded.global_cursor < 0 or loaded.global_batch_size <= 0:
            raise CheckpointMismatch(f"loader state is out of range: {state!r}")
        return loaded

    def check_manifest(self, now: dict[str, Any]) -> None:
        """Refuse a resume whose dataset, pipeline or order changed since this state was taken,
        naming what changed; log a change of the service's packages (manifest_diff.py)."""
        assert self.manifest is not None
        changed = manifest_diff.refusals(self.manifest, now)
        if changed:
            raise CheckpointMismatch("cannot resume this checkpoint: its dataset or pipeline changed since it was "
                                     "taken: " + "; ".join(changed))
        upgraded = manifest_diff.notes(self.manifest, now)
        if upgraded:
            log.warning("resuming on a service whose packages changed since the checkpoint: %s", ", ".join(upgraded))

    def resume_step(self, spec: pb.JobSpec, dataset_fingerprint: str) -> int:
        """The step this loader resumes at, or a clear error if it cannot resume this state."""
        if fingerprint(spec) != self.spec_fingerprint:  # the job's one fingerprint (job_options.py)
            raise CheckpointMismatch(
                "the checkpoint was taken with a different job spec (dataset, shuffle, seed, drop_last, "
                "transform or columns differ): resume with the spec it was saved with")
        if dataset_fingerprint != self.dataset_fingerprint:
            raise CheckpointMismatch(
                f"the dataset changed since the checkpoint (fingerprint {self.dataset_fingerprint}, "
                f"now {dataset_fingerprint}): its order would not continue where it stopped")
        global_batch = spec.world_size * spec.batch_size
        if global_batch != self.global_batch_size:
            raise CheckpointMismatch(
                f"the checkpoint was taken with a global batch of {self.global_batch_size} samples; this "
                f"loader has world_size {spec.world_size} x batch_size {spec.batch_size} = {global_batch}. "
                "Keep world_size x batch_size the same to resume on a different world size")
        return self.global_cursor // global_batch


__all__ = ["STATE_VERSION", "LoaderState"]
