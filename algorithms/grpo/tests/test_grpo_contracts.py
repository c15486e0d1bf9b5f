"""algorithm=grpo and algorithm=cispo pass the algorithm contract third-party algorithms are held to
(rlloom_trainer.contracts)."""

from rlloom_trainer.contracts import AlgorithmContract


class TestGRPO(AlgorithmContract):
    entry_point = "grpo"
    name = "grpo"
