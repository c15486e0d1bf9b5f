"""``SGLangRolloutEngine``: SGLang's server driven over its native HTTP API.

Generation goes through the ``rollout=server`` client (:class:`rlloom_serverkit.client.ServerRolloutEngine`)
in SGLang's dialect: one request per sample, each with a seed of its own (``sampling_seed``, derived
from the call's seed, the prompt's index and the sample's; see :func:`rlloom_serverkit.schema.sample_seed`),
token ids in and out, log-probs of the sampled tokens (``return_logprob``).

Weights: SGLang's ``/update_weights_from_tensor`` takes tensors serialised for its own processes
(CUDA IPC handles), which a trainer in another process cannot produce portably, so a sync writes a
Hugging Face folder (safetensors shards and the model's ``config.json``) and calls
``/update_weights_from_disk`` on it; the server must see that folder (same machine or shared file
system).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable

import torch
from rlloom import Batch, Completion, EngineSpec, SamplingParams
from rlloom_enginekit.safetensors_dir import write_safetensors_dir
from rlloom_serverkit.client import ServerRolloutEngine

from rlloom_sglang.config import SGLangRolloutConfig
from rlloom_sglang.launch import check_can_launch, start_server

CONFIG_FILES = ("config.json", "generation_config.json")
INDEX_FILE = "model.safetensors.index.json"
SHARD_BYTES = 1024 * 10**6


def write_weights_folder(named_tensors: Iterable[tuple[str, torch.Tensor]], folder: str, model_path: str) -> None:
    """``folder`` as a Hugging Face model folder SGLang (or transformers) can load: the tensors as
    safetensors shards with their ``model.safetensors.index.json``, plus the config files of
    ``model_path``."""
    from safetensors import safe_open

    _, num_bytes = write_safetensors_dir(named_tensors, folder, SHARD_BYTES)
    weight_map = {}
    for file_name in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        with safe_open(os.path.join(folder, file_name), framework="pt") as handle:
            weight_map.update({name: file_name for name in handle.keys()})
    with open(os.path.join(folder, INDEX_FILE), "w") as handle:
        json.dump({"metadata": {"total_size": num_bytes}, "weight_map": weight_map}, handle)
    for name in CONFIG_FILES:
        if os.path.isfile(os.path.join(model_path, name)):
            shutil.copy(os.path.join(model_path, name), os.path.join(folder, name))


class SGLangRolloutEngine:
    """A :class:`~rlloom.protocols.RolloutEngine` (and ``AsyncRolloutEngine``) on an SGLang server
    it launches (on a CUDA machine with SGLang installed) or attaches to (``cfg.url``)."""

    def __init__(self, cfg: SGLangRolloutConfig, spec: EngineSpec) -> None:
        self.config = cfg
        self.model_path = spec.model_path
        self.process: subprocess.Popen | None = None
        if cfg.url:
            url = str(cfg.url).rstrip("/")
        else:
            check_can_launch(torch.cuda.is_available())
            self.process, url, self.log_path = start_server(cfg, spec.model_path, spec.seed)
        self._own_weights_dir = cfg.weights_dir is None
        self.weights_dir = cfg.weights_dir or tempfile.mkdtemp(prefix="rlloom-sglang-weights-")
        try:
            self.client = ServerRolloutEngine(cfg.client_config(url), spec, send_prompt_index=False)
        except BaseException:
            self.close()
            raise

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Contract: ``RolloutEngine.generate`` (one request per prompt, see the module doc)."""
        return self.client.generate(prompts, sampling)

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        return await self.client.generate_one(prompt_ids, sampling)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Write the tensors as a model folder under ``weights_dir`` and have SGLang load it."""
        write_weights_folder(named_tensors, self.weights_dir, self.model_path)
        self.client.load_weights_from_dir(self.weights_dir)

    def sleep(self) -> None:
        self.client.sleep()

    def wake_up(self) -> None:
        self.client.wake_up()

    def metrics(self) -> dict[str, float]:
        return self.client.metrics()

    def close(self) -> None:
        """Stop the server this engine launched (an attached one keeps running) and remove the
        temporary weights folder."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
        if getattr(self, "_own_weights_dir", False):
            shutil.rmtree(self.weights_dir, ignore_errors=True)
