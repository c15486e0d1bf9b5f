"""Dataset sizes, disjoint splits, determinism per seed, and arithmetic ground truth."""

import random

import pytest
from rlloom_tasks.data.arithmetic import ArithmeticDataConfig, build_arithmetic
from rlloom_tasks.data.digits import DigitsDataConfig, build_digits
from rlloom_tasks.data.gym import ReasoningGymDataConfig, build_reasoning_gym


def _text(record) -> str:
    return record.prompt if isinstance(record.prompt, str) else record.prompt[-1]["content"]


def _texts(records) -> list[str]:
    return [_text(record) for record in records]


def _assert_disjoint_and_distinct(splits):
    train, val = _texts(splits.train), _texts(splits.val)
    assert len(set(train)) == len(train)
    assert len(set(val)) == len(val)
    assert not set(train) & set(val)


# ------------------------------------------------------------------------------------ arithmetic
def test_arithmetic_default_split_is_64_val_36_train_of_the_100_one_digit_sums():
    splits = build_arithmetic(ArithmeticDataConfig(), seed=0)
    assert (len(splits.val), len(splits.train)) == (64, 36)
    _assert_disjoint_and_distinct(splits)
    all_pairs = {f"What is {a}+{b}? Reply with only the number." for a in range(10) for b in range(10)}
    assert set(_texts(splits.train)) | set(_texts(splits.val)) == all_pairs
    record = splits.val[0]
    assert record.data_source == "arithmetic"
    assert record.prompt[0]["role"] == "user" and len(record.prompt) == 1


def test_arithmetic_split_is_the_seeded_shuffle_of_the_pairs():
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(7).shuffle(pairs)
    expected_val = [f"What is {a}+{b}? Reply with only the number." for a, b in pairs[:64]]
    assert _texts(build_arithmetic(ArithmeticDataConfig(), seed=7).val) == expected_val


def test_arithmetic_is_deterministic_per_seed_and_differs_across_seeds():
    first, again = build_arithmetic(ArithmeticDataConfig(), 3), build_arithmetic(ArithmeticDataConfig(), 3)
    assert first == again
    assert _texts(build_arithmetic(ArithmeticDataConfig(), 4).val) != _texts(first.val)


def test_arithmetic_ground_truth_matches_python_eval_for_every_operation():
    cfg = ArithmeticDataConfig(operations=["+", "-", "*"], num_val=50, num_train=0)
    splits = build_arithmetic(cfg, seed=1)
    assert (len(splits.val), len(splits.train)) == (50, 300 - 50)
    _assert_disjoint_and_distinct(splits)
    for record in splits.train + splits.val:
        expression = record.extra["expression"]
        assert f"What is {expression}?" in _text(record)
        assert record.ground_truth == str(eval(expression))  # noqa: S307 - our own digits-and-operator text
    assert any(r.ground_truth.startswith("-") for r in splits.train + splits.val)


def test_arithmetic_two_digits_and_num_train():
    splits = build_arithmetic(ArithmeticDataConfig(digits=2, num_val=10, num_train=25), seed=0)
    assert (len(splits.val), len(splits.train)) == (10, 25)
    _assert_disjoint_and_distinct(splits)
    for record in splits.train + splits.val:
        a, b = record.extra["expression"].split("+")
        assert 0 <= int(a) <= 99 and 0 <= int(b) <= 99


def test_arithmetic_template_is_used():
    cfg = ArithmeticDataConfig(template="Compute {a} plus {b}.", num_val=1, num_train=1)
    (record,) = build_arithmetic(cfg, seed=0).val
    a, b = record.extra["expression"].split("+")
    assert _text(record) == f"Compute {a} plus {b}."


@pytest.mark.parametrize(
    "cfg, message",
    [
        (ArithmeticDataConfig(num_val=64, num_train=40), r"64 \+ 40 = 104 exceeds the 100 distinct problems"),
        (ArithmeticDataConfig(num_val=100), "num_val=100 leaves none of the 100"),
        (ArithmeticDataConfig(operations=["/"]), r"data\.operations=\['/'\]"),
        (ArithmeticDataConfig(operations=["+", "+"]), r"data\.operations"),
        (ArithmeticDataConfig(digits=0), "data.digits must be >= 1, got 0"),
        (ArithmeticDataConfig(template="What is {a}?"), r"data\.template='What is \{a\}\?'"),
        (ArithmeticDataConfig(operations=["+", "*"], template="{a} and {b}"), r"\['a', 'b', 'op'\]"),
        (ArithmeticDataConfig(digits=4), "gives 100000000 problems"),
    ],
)
def test_arithmetic_rejects_bad_configs_naming_the_field(cfg, message):
    with pytest.raises(ValueError, match=message):
        build_arithmetic(cfg, seed=0)


# ------------------------------------------------------------------------------------ digits
def test_digits_sizes_disjoint_plain_text_and_deterministic():
    splits = build_digits(DigitsDataConfig(), seed=0)
    assert (len(splits.val), len(splits.train)) == (4, 20)
    _assert_disjoint_and_distinct(splits)
    assert "Q: pick a digit\nA:" in _texts(splits.train) + _texts(splits.val)
    for record in splits.train + splits.val:
        assert isinstance(record.prompt, str) and record.prompt.startswith("Q: ") and record.prompt.endswith("\nA:")
        assert record.data_source == "digits"
    assert build_digits(DigitsDataConfig(), seed=0) == splits
    assert _texts(build_digits(DigitsDataConfig(), seed=1).train) != _texts(splits.train)


def test_digits_demonstrations_depend_on_the_object_only():
    expected = {"a digit": " 1", "one digit": " 2", "a single digit": " 3", "any digit": " 4"}
    for seed in (0, 1):
        splits = build_digits(DigitsDataConfig(), seed=seed)
        for record in splits.train + splits.val:
            obj = record.prompt.removeprefix("Q: ").removesuffix("\nA:").split(" ", 1)[1]
            assert record.extra == {"response": expected[obj]}
            assert record.ground_truth is None


def test_digits_num_train_and_size_error():
    assert len(build_digits(DigitsDataConfig(num_val=2, num_train=5), seed=0).train) == 5
    with pytest.raises(ValueError, match=r"4 \+ 30 = 34 exceeds the 24"):
        build_digits(DigitsDataConfig(num_train=30), seed=0)


# ------------------------------------------------------------------------------------ reasoning_gym
def test_reasoning_gym_sizes_disjoint_deterministic_and_record_layout():
    cfg = ReasoningGymDataConfig(task="basic_arithmetic", num_train=40, num_val=10)
    splits = build_reasoning_gym(cfg, seed=0)
    assert (len(splits.val), len(splits.train)) == (10, 40)
    _assert_disjoint_and_distinct(splits)
    record = splits.train[0]
    entry = record.extra["entry"]
    assert record.prompt == [{"role": "user", "content": entry["question"] + cfg.instruction}]
    assert record.ground_truth == entry["answer"]
    assert record.data_source == "reasoning_gym/basic_arithmetic"
    assert (record.extra["task"], record.extra["task_config"]) == ("basic_arithmetic", {})
    assert build_reasoning_gym(cfg, seed=0) == splits
    assert _texts(build_reasoning_gym(cfg, seed=1).train) != _texts(splits.train)


def test_reasoning_gym_deduplicates_a_small_problem_space():
    import reasoning_gym

    small = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # at most 200 questions
    raw = [reasoning_gym.create_dataset("chain_sum", size=120, seed=s, **small) for s in (0, 1)]
    raw_questions = [[entry["question"] for entry in dataset] for dataset in raw]
    # Precondition: plain draws repeat questions and overlap across seeds, so dedup has work to do.
    assert len(set(raw_questions[0])) < 120
    assert set(raw_questions[0]) & set(raw_questions[1])

    cfg = ReasoningGymDataConfig(task="chain_sum", task_config=small, num_train=80, num_val=40)
    splits = build_reasoning_gym(cfg, seed=0)
    assert (len(splits.val), len(splits.train)) == (40, 80)
    _assert_disjoint_and_distinct(splits)

    with pytest.raises(ValueError, match="gave only .* new distinct questions"):
        build_reasoning_gym(ReasoningGymDataConfig(task="chain_sum", task_config=small, num_train=250, num_val=10), 1)


def test_reasoning_gym_unknown_task_lists_valid_names():
    with pytest.raises(ValueError, match=r"data\.task='chainsum'.*Did you mean chain_sum.*basic_arithmetic"):
        build_reasoning_gym(ReasoningGymDataConfig(task="chainsum"), seed=0)


@pytest.mark.parametrize(
    "task_config, message",
    [
        ({"no_such_option": 1}, r"options are \['min_terms'"),
        ({"size": 5}, r"must not set \['size'\]"),
    ],
)
def test_reasoning_gym_rejects_bad_task_config(task_config, message):
    with pytest.raises(ValueError, match=message):
        cfg = ReasoningGymDataConfig(task="chain_sum", task_config=task_config, num_train=2, num_val=1)
        build_reasoning_gym(cfg, seed=0)
