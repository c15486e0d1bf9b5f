"""``rollout=sglang rollout.offline=true``: SGLang's in-process ``sglang.Engine`` (no HTTP server).

The engine takes the same request fields as the server's ``/generate`` (lists of ``input_ids`` and
``sampling_params``, ``return_logprob``) and answers the same objects, so requests are built and
answers read by :mod:`rlloom_serverkit.schema` in SGLang's dialect (one request per sample, each with
its own seed). Weights go in as tensors through ``update_weights_from_tensor`` (same process, no
copy to disk), in buckets of ``WEIGHT_BUCKET_BYTES``; sleep and wake-up are
``release_memory_occupation`` / ``resume_memory_occupation`` (the engine is built with
``enable_memory_saver`` when ``rollout.sleep_servers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from rlloom import Batch, EngineSpec, SamplingParams
from rlloom_enginekit.batching import completions_batch
from rlloom_enginekit.prompts import check_left_padded, model_token_ids, prompt_indices, prompt_token_lists
from rlloom_enginekit.safetensors_dir import tensor_buckets
from rlloom_serverkit.schema import generate_bodies, merge_completions, parse_generate_answer

from rlloom_sglang.config import SGLangRolloutConfig
from rlloom_sglang.launch import check_can_launch

WEIGHT_BUCKET_BYTES = 512 * 10**6


class SGLangOfflineEngine:
    """A :class:`~rlloom.protocols.RolloutEngine` on ``sglang.Engine`` in this process (CUDA only)."""

    def __init__(self, cfg: SGLangRolloutConfig, spec: EngineSpec) -> None:
        check_can_launch(torch.cuda.is_available())
        import sglang

        _, self.pad_id = model_token_ids(spec.model_path)
        self.config = cfg
        self._generator = torch.Generator().manual_seed(spec.seed)
        self.engine = sglang.Engine(model_path=spec.model_path, tp_size=cfg.tp_size,
                                    mem_fraction_static=cfg.mem_fraction_static, dtype=cfg.dtype,
                                    random_seed=spec.seed, enable_memory_saver=cfg.sleep_servers,
                                    log_level="warning")

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Contract: ``RolloutEngine.generate``; all samples of the call in one ``Engine.generate``."""
        prompts.require("prompts", "prompt_mask")
        check_left_padded(prompts["prompts"], prompts["prompt_mask"])
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(2**62, (), generator=self._generator))
        token_lists = prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])
        indices = prompt_indices(prompts, sampling.first_prompt).tolist()
        bodies = [body for ids, index in zip(token_lists, indices) for body in generate_bodies(
            ids, dataclasses.replace(sampling, first_prompt=index), seed, with_prompt_index=False)]
        outputs = self.engine.generate(input_ids=[b["input_ids"] for b in bodies],
                                       sampling_params=[b["sampling_params"] for b in bodies], return_logprob=True)
        samples = [parse_generate_answer(output, 1) for output in outputs]
        answers = [merge_completions(samples[i * sampling.n : (i + 1) * sampling.n]) for i in range(len(token_lists))]
        return completions_batch(prompts, answers, sampling, self.pad_id)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Full tensors (Hugging Face names) into the engine, a bucket at a time."""
        for bucket in tensor_buckets(((name, tensor.detach()) for name, tensor in named_tensors), WEIGHT_BUCKET_BYTES):
            self.engine.update_weights_from_tensor(named_tensors=bucket)

    def sleep(self) -> None:
        if self.config.sleep_servers:
            self.engine.release_memory_occupation()

    def wake_up(self) -> None:
        if self.config.sleep_servers:
            self.engine.resume_memory_occupation()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
