"""``VLLMRolloutEngine``: the :class:`rlloom.protocols.RolloutEngine` on vLLM's offline ``LLM``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

import torch
from rlloom import Batch, Completion, EngineSpec, SamplingParams
from rlloom_enginekit.batching import completions_batch
from rlloom_enginekit.prompts import (check_left_padded, pad_token_id, prompt_indices, prompt_token_lists,
                                     stop_ids_for, stop_token_ids)
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from rlloom_vllm.config import VLLMRolloutConfig
from rlloom_vllm.memory import cuda_used_bytes, release_pages, rss_bytes
from rlloom_vllm.names import NameMap
from rlloom_vllm.outputs import completion_of, request_seeds
from rlloom_vllm.platform import check_cpu_head_size, check_platform, import_vllm
from rlloom_vllm.requests import EngineLoop

def _reload(worker, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Runs on the worker (in-process, CPU): rebuild the model from checkpoint-format tensors."""
    worker.reload_weights(weights_iterator=weights)
    _retie_lm_head(worker)


def _load_in_place(worker, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Runs on the worker (in-process, CUDA): the model's own ``load_weights`` copies each
    checkpoint-format tensor into the existing parameters (into its slice of the fused q/k/v and
    gate/up ones, cast to the model's dtype), so the addresses the captured CUDA graphs read stay
    valid; tensors already on the GPU are copied device to device. Unquantized layers keep no
    re-packed copy on CUDA, so nothing else needs refreshing."""
    worker.model_runner.model.load_weights(weights=weights)


def _retie_lm_head(worker) -> bool:
    """Runs on the worker after a reload: with tied embeddings, point ``lm_head`` at the rebuilt
    embedding and let its method re-pack it; returns whether the model is tied.

    ``reload_weights`` rebuilds ``model.embed_tokens`` but not ``lm_head``, which shares its weight:
    on CPU the head keeps the old packed copy and the logits come from the old embedding (vLLM
    0.32). Re-tying is harmless where the head already follows.
    """
    model = worker.model_runner.model
    if not getattr(worker.model_runner.model_config.hf_config, "tie_word_embeddings", False):
        return False
    head = model.lm_head
    head.weight = model.model.embed_tokens.weight
    head.quant_method.process_weights_after_loading(head)
    return True


def _parameter_names(worker) -> list[str]:
    """The model's parameters, each LoRA-wrapped layer's (``rollout.max_lora_rank > 0``) under its layer's
    name: vLLM's ``load_weights`` routes ``…qkv_proj.weight`` to ``…qkv_proj.base_layer.weight``."""
    return [name.replace(".base_layer.", ".") for name, _ in worker.model_runner.model.named_parameters()]


def _release_kv_cache(worker) -> int:
    return release_pages(worker.model_runner.kv_caches)


class VLLMRolloutEngine:
    """Samples responses with vLLM from token ids; see :meth:`generate` for the contract.

    ``tokenizer`` is public (loaded with transformers from ``spec.model_path``). The engine's
    random state is seeded with ``spec.seed``: a call without ``sampling.seed`` draws its seed from
    it, so a run is reproducible call after call. ``memory`` holds resident-memory readings (bytes)
    taken by :meth:`sleep` / :meth:`wake_up` (and, on CUDA, ``cuda_memory`` the device memory in
    use at the same points); ``last_reload_seconds`` the time of the last reload. ``plan`` says
    what the engine does on its device (:class:`~rlloom_vllm.config.EnginePlan`).
    """

    def __init__(self, cfg: VLLMRolloutConfig, spec: EngineSpec) -> None:
        self.config = cfg
        self.plan = cfg.plan(cfg.device_for(spec.device))
        os.environ.update(cfg.environment())
        vllm = import_vllm()
        check_platform(self.plan.device)
        if not self.plan.cuda:
            check_cpu_head_size(spec.model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(spec.model_path)
        generation_config = _generation_config(spec.model_path)
        self.stop_ids = stop_token_ids(generation_config, self.tokenizer)
        self.pad_id = pad_token_id(generation_config, self.tokenizer, self.stop_ids)
        self.llm = vllm.LLM(model=spec.model_path, seed=spec.seed, **self.plan.llm_kwargs)
        self.names = NameMap(self.llm.collective_rpc(_parameter_names)[0])
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len  # rollout.max_model_len or the model's
        self._generator = torch.Generator().manual_seed(spec.seed)
        self._sampling_type = vllm.SamplingParams
        self._asleep = False
        self.memory: dict[str, int] = {}
        self.cuda_memory: dict[str, int] = {}
        self._record("awake")
        self.last_reload_seconds = 0.0
        self._engine_lock = threading.Lock()  # held by a batch call, or while generate_one's requests run
        self._loop: EngineLoop | None = None
        self.adapter = None  # the LoRARequest every request generates with (load_adapter), or None

    # ------------------------------------------------------------------------------ generation
    def vllm_sampling(self, sampling: SamplingParams, n: int, seed: int):
        """vLLM ``SamplingParams`` for one request: ``n`` samples, stop on the stop ids (kept in the
        output; with ``sampling.ignore_eos`` none of the model's, vLLM's ``ignore_eos``, so a response
        runs to ``max_new_tokens`` unless it meets one of ``sampling.stop_token_ids``), the sampled token's log-prob only (none when
        ``sampling.filtered``: see :mod:`rlloom_vllm.outputs`), no detokenisation."""
        return self._sampling_type(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=stop_ids_for(self.stop_ids, sampling),
            ignore_eos=sampling.ignore_eos,
            logprobs=None if sampling.filtered else 0,
            seed=seed,
            detokenize=False,
        )

    def requests(self, token_lists: list[list[int]], indices: list[int], sampling: SamplingParams
                 ) -> tuple[list[dict], list]:
        """vLLM prompts and sampling params for the prompts ``token_lists`` whose indices in the call
        are ``indices``: one request of ``n`` samples per prompt (greedy: ``n`` requests of one, since
        vLLM refuses greedy ``n > 1``), each with its own seed, derived from ``sampling.seed`` (or a
        draw of the engine's generator) and the prompt's index and copy, so a prompt samples the same
        whatever else is in the call."""
        seed = sampling.seed
        if seed is None:
            seed = int(torch.randint(2**62, (), generator=self._generator))
        per_request = 1 if sampling.greedy else sampling.n
        copies = sampling.n // per_request
        all_seeds = request_seeds(seed, (max(indices, default=-1) + 1) * copies)
        requests = [{"prompt_token_ids": ids} for ids in token_lists for _ in range(copies)]
        params = [self.vllm_sampling(sampling, per_request, all_seeds[index * copies + copy])
                  for index in indices for copy in range(copies)]
        return requests, params

    async def generate_one(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """One prompt's responses (contract: ``AsyncRolloutEngine.generate_one``) through vLLM's own
        engine loop with continuous batching (:class:`~rlloom_vllm.requests.EngineLoop`): a request
        joins the running batch at the engine's next step. Its tokens equal a batch call's for the
        prompt at index ``sampling.first_prompt``."""
        self._ready("generate_one")
        if self._loop is None:
            self._loop = EngineLoop(self.llm.llm_engine, self._engine_lock)
        requests, params = self.requests([list(prompt_ids)], [sampling.first_prompt], sampling)
        outputs = await self._loop.submit(requests, params, self.adapter)
        return completion_of(outputs, sampling.n, with_log_probs=not sampling.filtered)

    def generate(self, prompts: Batch, sampling: SamplingParams) -> Batch:
        """Sample ``sampling.n`` responses per prompt row (contract: ``RolloutEngine.generate``).

        Left padding is stripped and each prompt is sent as token ids, one request with ``n``
        samples (greedy: ``n`` requests of one sample, since vLLM refuses greedy ``n > 1``). Every
        request gets its own seed derived from ``sampling.seed`` (or from the engine's generator when
        it is None), so the same engine weights, input and seed give the same output.
        ``rollout_log_probs`` is left out when ``sampling.filtered`` (see :mod:`rlloom_vllm.outputs`).
        """
        self._ready("generate")
        prompts.require("prompts", "prompt_mask")
        check_left_padded(prompts["prompts"], prompts["prompt_mask"])
        token_lists = prompt_token_lists(prompts["prompts"], prompts["prompt_mask"])
        longest = max(map(len, token_lists), default=0)
        if longest + sampling.max_new_tokens > self.max_model_len:
            raise ValueError(
                f"rollout.max_model_len={self.max_model_len} is shorter than the longest prompt ({longest} "
                f"tokens) plus sampling.max_new_tokens={sampling.max_new_tokens}"
            )
        requests, params = self.requests(token_lists, prompt_indices(prompts, sampling.first_prompt).tolist(), sampling)
        with self._engine_lock:  # never while generate_one's requests are in the engine
            outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.adapter) if requests else []
        copies = len(requests) // max(len(token_lists), 1)  # requests per prompt (n when greedy, else 1)
        answers = [completion_of(outputs[i * copies : (i + 1) * copies], sampling.n, with_log_probs=not sampling.filtered)
                   for i in range(len(token_lists))]
        return completions_batch(prompts, answers, sampling, self.pad_id)

    # ------------------------------------------------------------------------------ weights
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full tensors in Hugging Face naming into the vLLM model (in-process mode only).

        On CPU the stream goes into the worker's ``reload_weights(weights_iterator=…)``, which
        rebuilds the model layer by layer and re-packs the CPU kernels' weight layouts (copying into
        the parameters would not be seen by those kernels). On CUDA it goes into the model's
        ``load_weights``, in place (:func:`_load_in_place`); vLLM's sleep offloads the weights, so
        there the engine must be awake (a RuntimeError otherwise). Names are checked by
        :class:`NameMap`; every engine parameter must be fed, else a ValueError lists the missing
        ones (the engine's weights are then undefined). The prefix cache is reset: its KV came from
        the old weights.
        """
        self._ready("update_weights", allow_asleep=not self.plan.vllm_sleep)
        if not self.config.in_process:
            raise ValueError("update_weights needs rollout.in_process=true (the tensors cannot reach vLLM's "
                             "engine process without a copy); with a multi-process engine use resharder=safetensors")
        covered: set[str] = set()
        start = time.perf_counter()
        load = _load_in_place if self.plan.update_in_place else _reload
        with self._engine_lock:  # not while generate_one's requests run
            self.llm.collective_rpc(load, args=(self.names.stream(named_tensors, covered),))
        self._after_reload(covered, start)

    def load_adapter(self, path: str, name: str) -> None:
        """Generate from now on with the PEFT adapter folder ``path`` on the loaded weights
        (:class:`rlloom_enginekit.lora.LoadsAdapters`): vLLM's ``add_lora`` of a ``LoRARequest(name, id)``, the
        id one more than the last, then the previous adapter removed, so no request meets an older one; the
        prefix cache is reset. ValueError without LoRA slots (``rollout.max_lora_rank=0``)."""
        self._ready("load_adapter", allow_asleep=not self.plan.vllm_sleep)
        if not self.plan.lora:
            raise ValueError("load_adapter: this vLLM engine has no LoRA slots; set rollout.max_lora_rank to the "
                             "adapters' rank (or above: 1, 8, 16, 32, ...)")
        from vllm.lora.request import LoRARequest

        previous = self.adapter
        adapter = LoRARequest(name, previous.lora_int_id + 1 if previous else 1, path)
        with self._engine_lock:
            if not self.llm.llm_engine.add_lora(adapter):
                raise RuntimeError(f"load_adapter: vLLM did not load the adapter folder {path}")
            if previous is not None:
                self.llm.llm_engine.remove_lora(previous.lora_int_id)
            self.adapter = adapter
            self.llm.reset_prefix_cache()

    def load_weights_from_dir(self, path: str) -> None:
        """Rebuild the vLLM model from the ``*.safetensors`` files in ``path`` (Hugging Face naming;
        works in-process and multi-process; on CUDA the engine must be awake). vLLM keeps ``path`` as
        its model path afterwards."""
        self._ready("load_weights_from_dir", allow_asleep=not self.plan.vllm_sleep)
        start = time.perf_counter()
        with self._engine_lock:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": path})
            self.llm.collective_rpc(_retie_lm_head)
        self._after_reload(None, start)

    def _after_reload(self, covered: set[str] | None, start: float) -> None:
        self.llm.reset_prefix_cache()
        self.last_reload_seconds = time.perf_counter() - start
        if covered is not None and (missing := self.names.missing(covered)):
            raise ValueError(f"update_weights: no tensor was given for the vLLM parameter(s) {missing}")

    # ------------------------------------------------------------------------------ lifecycle
    def sleep(self) -> None:
        """Enter the asleep state until :meth:`wake_up`; ``generate`` refuses to run meanwhile.

        On CUDA this is vLLM's level-1 sleep (KV cache discarded, weights offloaded to host memory;
        the engine is built with sleep mode unless ``rollout.sleep_mode=false``, which makes sleep
        free nothing); weights can be loaded only after :meth:`wake_up`. vLLM's CPU build has no
        sleep mode, so on CPU (in-process, ``free_kv_cache_on_sleep``) the prefix cache is reset and
        the KV-cache pages are returned to the OS (they read as zeros on reuse, and nothing valid is
        cached); the weights stay (there is nowhere cheaper to keep them). ``memory`` (and on CUDA
        ``cuda_memory``) record ``before_sleep`` and ``asleep``.
        """
        self._ready("sleep", allow_asleep=True)
        self._record("before_sleep")
        with self._engine_lock:
            if self.plan.vllm_sleep:
                self.llm.sleep(level=1)
            elif self.plan.release_kv_pages:
                self.llm.reset_prefix_cache()
                self.llm.collective_rpc(_release_kv_cache)
        self._asleep = True
        self._record("asleep")

    def wake_up(self) -> None:
        """Leave the asleep state (on CUDA, vLLM's ``wake_up``: weights back on the GPU as they were
        before :meth:`sleep`, an empty KV cache; on CPU the KV pages come back as they are touched).
        Records ``awake``."""
        self._ready("wake_up", allow_asleep=True)
        if self.plan.vllm_sleep:
            self.llm.wake_up()
        self._asleep = False
        self._record("awake")

    def _record(self, phase: str) -> None:
        self.memory[phase] = rss_bytes()
        if self.plan.cuda:
            self.cuda_memory[phase] = cuda_used_bytes(self.plan.device)

    def metrics(self) -> dict[str, float]:
        """``rollout/rss_gb/<phase>`` for the readings in ``memory``, on CUDA also
        ``rollout/cuda_used_gb/<phase>`` for those in ``cuda_memory``, and
        ``timing_s/rollout_reload``."""
        out = {f"rollout/rss_gb/{phase}": value / 1e9 for phase, value in self.memory.items()}
        out.update({f"rollout/cuda_used_gb/{phase}": value / 1e9 for phase, value in self.cuda_memory.items()})
        out["timing_s/rollout_reload"] = self.last_reload_seconds
        return out

    def close(self) -> None:
        """Shut the engine down (its processes, KV cache and weights). Later calls raise."""
        if self.llm is not None:
            engine = self.llm.llm_engine
            self.llm = None
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()

    def _ready(self, action: str, allow_asleep: bool = False) -> None:
        if self.llm is None:
            raise RuntimeError(f"VLLMRolloutEngine.{action}: the engine is closed")
        if self._asleep and not allow_asleep:
            raise RuntimeError(f"VLLMRolloutEngine.{action}: the engine is asleep; call wake_up() first")


def _generation_config(model_path: str) -> GenerationConfig:
    try:
        return GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json: the model config's ids
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_path))
