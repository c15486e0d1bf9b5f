"""train_engine=fsdp passes the train engine contract third-party engines are held to (rlloom_trainer.contracts)."""

from rlloom_trainer.contracts import TrainEngineContract


class TestFSDPTrainEngine(TrainEngineContract):
    entry_point = "fsdp"
    name = "fsdp"
