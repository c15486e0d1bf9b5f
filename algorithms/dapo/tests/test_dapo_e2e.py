"""``algorithm=dapo`` on the tiny preset: reward rises, dynamic sampling refills, overlong shaping logs."""

import pytest
from rlloom_trainer.testing import train_tiny, training_rows


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    # n = 4: groups of a random-init model often all score 0, so dynamic sampling must refill.
    rows = train_tiny(tmp_path_factory.mktemp("dapo-run"), "algorithm=dapo", "algorithm.n=4",
                      "algorithm.overlong_buffer_enable=true", "algorithm.overlong_buffer_len=2",
                      "algorithm.overlong_penalty_factor=0.5", cache_dir=tmp_path_factory.mktemp("cache"))
    return training_rows(rows, key="dapo/gen_rounds")


@pytest.mark.slow
def test_dapo_reward_rises(rows):
    scores = [row["critic/score/mean"] for row in rows]
    assert len(scores) == 20
    assert sum(scores[-3:]) / 3 > sum(scores[:3]) / 3 + 0.4, scores


@pytest.mark.slow
def test_dynamic_sampling_refills_and_accounts_for_groups(rows):
    assert any(row["dapo/gen_rounds"] > 1 for row in rows)
    for row in rows:
        assert 1 <= row["dapo/gen_rounds"] <= 3
        assert row["dapo/kept_groups"] + row["dapo/missing_groups"] == 4
        # a step stops early only when it has its 4 groups
        assert row["dapo/gen_rounds"] == 3 or row["dapo/missing_groups"] == 0
        if row["dapo/gen_rounds"] > 1:
            assert row["dapo/dropped_groups"] >= 1
        if row["dapo/kept_groups"]:
            assert "actor/pg_loss" in row


@pytest.mark.slow
def test_overlong_penalty_is_logged(rows):
    # 4-token budget, buffer 2: lengths 3 and 4 are penalised −0.25 and −0.5; never below −0.5.
    penalties = [row["dapo/overlong_penalty_mean"] for row in rows]
    assert all(-0.5 <= p <= 0.0 for p in penalties)
    assert min(penalties) < 0.0
