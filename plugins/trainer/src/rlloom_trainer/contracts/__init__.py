"""Contract tests for rlloom plugins, ours and third parties': a plugin's test module subclasses the contract
of each thing it provides, names its entry point and the name it registers, and pytest runs the inherited
tests against it::

    from rlloom_trainer.contracts import AlgorithmContract, RewardContract

    class TestMyAlgorithm(AlgorithmContract):
        entry_point = "my_plugin"      # the plugin's entry point in group ``rlloom``
        name = "my_algorithm"          # what ``algorithm=`` selects

    class TestMyReward(RewardContract):
        entry_point = "my_plugin"
        name = "my_reward"
        rows = [("The answer is 4.", "4")]   # (response text, ground truth) it should score

Each contract checks what the rest of rlloom relies on, through the plugin's own entry point loaded alone:

- every kind (:class:`PluginContract`): the entry point loads, registers the name, and imports no torch
  (every ``rlloom`` command loads every plugin's entry point, so its imports are paid by a config error);
- :class:`AlgorithmContract`: two steps of ``preset=tiny`` train with it, every metric finite;
- :class:`RewardContract`: one finite score per row, and rows a verifier chokes on counted, never raised;
- :class:`RolloutEngineContract`: left padding, ``n`` interleaved samples, responses that stop at EOS, the seed
  contract (same seed, same samples; a call split by prompts samples what the whole call does), and
  ``rollout_log_probs`` equal to a plain transformers forward's log-softmax at the sampled tokens;
- :class:`TrainEngineContract`: log-probs equal a plain forward's, and a train step changes the weights;
- :class:`DatasetContract`: non-empty, disjoint train and validation prompts, the same for the same seed.

The engines run on the tiny random model ``model=tiny`` builds (the fixture ``rlloom_tiny_model`` of
:mod:`rlloom_trainer.pytest_plugin`, which also registers the ``slow`` marker the longer contracts carry).
Our own plugins run the same contracts (their ``tests/test_contracts.py``), and so does the plugin template.
"""

from rlloom_trainer.contracts.algorithm import AlgorithmContract
from rlloom_trainer.contracts.dataset import DatasetContract
from rlloom_trainer.contracts.plugin import EngineContract, PluginContract
from rlloom_trainer.contracts.reward import RewardContract
from rlloom_trainer.contracts.rollout import RolloutEngineContract
from rlloom_trainer.contracts.train_engine import TrainEngineContract

__all__ = ["AlgorithmContract", "DatasetContract", "EngineContract", "PluginContract", "RewardContract", "RolloutEngineContract",
           "TrainEngineContract"]
