"""rlloom-megatron: a :class:`~rlloom.protocols.TrainEngine` on megatron-core ``GPTModel`` with tensor
parallelism (option ``train_engine=megatron``). Importing this package does not import megatron."""

from rlloom_megatron.config import MegatronConfig

__all__ = ["MegatronConfig"]
