"""bench.shuffled_reads: amplification of a sampled case, and the targets it prints."""

from __future__ import annotations

from bench.shuffled_reads import CaseResult, Workload, report


def _case(case: str, epoch: int, samples: int, seconds: float, storage: int) -> CaseResult:
    return CaseResult(case, epoch, samples, seconds, storage, dataset_bytes=1000, rows=100)


def test_a_sampled_case_is_scaled_to_a_whole_epoch() -> None:
    # 10 of 100 rows cost 5,000 bytes: a whole epoch would cost 50,000, 50x the dataset.
    assert _case("local row-group reader", 0, 10, 1.0, 5000).amplification == 50.0
    assert _case("local shuffled", 0, 100, 1.0, 1100).amplification == 1.1


def test_targets_pass_and_fail_on_their_thresholds() -> None:
    results = [
        _case("local unshuffled", 0, 100, 1.0, 1000), _case("local unshuffled", 1, 100, 1.0, 0),
        _case("local shuffled", 0, 100, 1.25, 1300), _case("local shuffled", 1, 100, 2.0, 0),
        _case("local row-group reader", 0, 10, 10.0, 5000),
    ]
    table, targets = report(results, Workload(), 256 << 20)
    verdicts = {t["name"]: (t["status"], round(t["value"], 2)) for t in targets}
    assert verdicts == {
        "local: read amplification, shuffled": ("FAIL", 1.3),
        "local: shuffled / unshuffled samples/s, epoch 0": ("PASS", 0.8),
        "local: shuffled / unshuffled samples/s, epoch 1": ("FAIL", 0.5),
    }
    assert "80.0x samples/s" in table  # shuffled (80/s) over the row-group reader (1/s)
