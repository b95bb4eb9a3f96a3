"""The coordinator's budget for decode actors' reports: a second per report while few actors run,
then less often, so the reports it takes a second stay within REPORTS_PER_S however many run."""

import pytest

from shardstream.service.control.pool import REPORTS_PER_S, report_interval


def test_few_actors_report_every_reconcile():
    assert report_interval(1, 1.0) == 1.0
    assert report_interval(int(REPORTS_PER_S), 1.0) == 1.0


@pytest.mark.parametrize("actors", [101, 500, 3040, 20000])
def test_many_actors_share_the_budget(actors):
    interval = report_interval(actors, 1.0)
    assert interval > 1.0
    assert actors / interval == pytest.approx(REPORTS_PER_S)


def test_a_slower_reconcile_is_never_hurried():
    assert report_interval(3040, 60.0) == 60.0
