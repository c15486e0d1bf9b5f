"""``rlloom train preset=tiny algorithm=sft``: the tiny random model learns data=digits' demonstrations,
and a GRPO run started from the SFT run's ``final_model`` (``model=hf``) begins where SFT ended."""

from __future__ import annotations

import pytest
import rlloom_trainer
from rlloom.cli import main
from rlloom_trainer.testing import metric_rows, train_tiny, training_rows

GREEDY = "val-core/digits/acc/greedy"
STEPS = 40  # lr 1e-2 (the preset's), 4 prompts a step: 16 seeds out of 16 reach greedy accuracy 1.0


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, cache):
    run_dir = tmp_path_factory.mktemp("sft-run")
    rows = train_tiny(run_dir, "algorithm=sft", "reward=format", "trainer.val_greedy=true",
                      f"trainer.total_steps={STEPS}", "trainer.test_freq=0", cache_dir=cache)
    return run_dir, rows


@pytest.fixture(scope="module")
def rl_rows(sft_run, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("grpo-from-sft")
    rlloom_trainer.train(["preset=tiny", "model=hf", f"model.path={sft_run[0] / 'final_model'}", "reward=format",
                          "trainer.val_greedy=true", "trainer.total_steps=1", f"trainer.run_dir={run_dir}"])
    return metric_rows(run_dir)


@pytest.mark.slow
def test_sft_teaches_the_format(sft_run):
    _, rows = sft_run
    greedy = [(row["step"], row[GREEDY]) for row in rows if GREEDY in row]
    assert [step for step, _ in greedy] == [0, STEPS]
    (_, before), (_, after) = greedy
    assert before <= 0.25 and after >= 0.75, greedy  # the random model never answers one digit and stops
    losses = [row["actor/sft_loss"] for row in training_rows(rows, "actor/sft_loss")]
    assert len(losses) == STEPS
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 / 3, losses


@pytest.mark.slow
def test_a_step_trains_on_the_demonstrations_without_generating(sft_run):
    _, rows = sft_run
    for row in training_rows(rows, "actor/sft_loss"):
        assert row["response_length/mean"] == 3.0  # " <d>" + EOS
        assert row["response_length/clip_ratio"] == 0.0
        for key in ("timing_s/update_actor", "timing_s/update_weights", "actor/grad_norm", "perf/total_tokens",
                    "perf/throughput"):
            assert key in row, key
        assert not {"timing_s/gen", "timing_s/reward", "timing_s/ref", "critic/score/mean"} & set(row)


@pytest.mark.slow
def test_rl_starts_from_the_sft_checkpoint(sft_run, rl_rows):
    _, sft_rows = sft_run
    sft_final = [row[GREEDY] for row in sft_rows if GREEDY in row][-1]
    rl_start = next(row for row in rl_rows if row["step"] == 0)
    assert rl_start[GREEDY] == sft_final  # greedy decoding of the same weights
    assert rl_start["val-core/digits/acc/mean@2"] >= 0.5  # sampled answers too: not the random model
    assert [row["step"] for row in training_rows(rl_rows)] == [1]


@pytest.mark.slow
def test_missing_demonstrations_exit_2_with_one_line(tmp_path, cache, capsys):
    code = main(["train", "preset=tiny", "algorithm=sft", "data=arithmetic", "reward=format",
                 "trainer.val_before_train=false", f"trainer.run_dir={tmp_path}", f"model.cache_dir={cache}"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert error.startswith("rlloom: error: algorithm.response_key=response: training prompt 0 ")
    assert "data_source 'arithmetic'" in error and "no key 'response'" in error
