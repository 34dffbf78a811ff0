from hypothesis import given
from hypothesis import strategies as st

from agents.housekeeping import partition_lag


def test_lag_is_unknown_until_the_log_end_is_known() -> None:
    assert partition_lag(None, 5) is None


def test_lag_counts_from_zero_when_nothing_was_committed() -> None:
    assert partition_lag(12, None) == 12


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_lag_is_the_uncommitted_distance_and_never_negative(end: int, committed: int) -> None:
    lag = partition_lag(end, committed)
    assert lag == max(end - committed, 0)
    assert lag is not None
    assert lag >= 0
