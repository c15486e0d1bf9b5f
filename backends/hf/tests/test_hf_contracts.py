"""rollout=hf passes the rollout engine contract third-party engines are held to (rlloom_trainer.contracts)."""

from rlloom_trainer.contracts import RolloutEngineContract


class TestHFRolloutEngine(RolloutEngineContract):
    entry_point = "hf"
    name = "hf"
