"""``rollout=sglang``: what it says where SGLang cannot run, how it launches SGLang, and its client
path (SGLang's dialect: a seed per prompt, weights reloaded from a folder) training end to end
against a server that speaks SGLang's API (``rlloom serve``; no SGLang server can run here)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from rlloom_server.testing import ServerProcess
from rlloom_sglang.config import SGLangRolloutConfig
from rlloom_sglang.engine import write_weights_folder
from rlloom_sglang.launch import launch_command
from rlloom_trainer.testing import train_tiny, training_rows

RLLOOM = os.path.join(os.path.dirname(sys.executable), "rlloom")
HAS_SGLANG = __import__("importlib").util.find_spec("sglang") is not None


def run_rlloom(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([RLLOOM, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.skipif(__import__("importlib").util.find_spec("sglang") is not None, reason="SGLang is installed here")
@pytest.mark.parametrize("mode", [[], ["rollout.offline=true"]], ids=["server", "offline"])
def test_without_sglang_the_error_names_the_package(tmp_path, mode):
    result = run_rlloom("train", "preset=tiny", "rollout=sglang", *mode, f"trainer.run_dir={tmp_path}")
    assert result.returncode == 2, result.stderr
    assert "pip install 'sglang==0.5.23'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a CUDA GPU")
@pytest.mark.skipif(HAS_SGLANG, reason="SGLang is installed here")
def test_with_sglang_installed_but_no_gpu_says_so(tmp_path):
    """SGLang installed, no GPU: a plain message. Whether SGLang is installed is whether ``import sglang`` would
    find a module (``rlloom_sglang.launch.check_can_launch`` imports nothing from it), so a package folder of that
    name on ``PYTHONPATH`` is installed SGLang as far as the check can tell (nothing is fetched from a registry)."""
    target = tmp_path / "site"
    (target / "sglang").mkdir(parents=True)
    (target / "sglang" / "__init__.py").write_text("")
    result = run_rlloom("train", "preset=tiny", "rollout=sglang", f"trainer.run_dir={tmp_path / 'run'}",
                        env={"PYTHONPATH": str(target)})
    assert result.returncode == 2, result.stderr
    assert "SGLang is installed but this machine has no CUDA GPU" in result.stderr


def test_launch_command():
    cfg = SGLangRolloutConfig(tp_size=2, mem_fraction_static=0.3, extra_args=["--chunked-prefill-size", "4096"])
    command = launch_command(cfg, "/models/m", 31000, seed=7)
    assert command[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(command[3::2], command[4::2]))
    assert flags["--model-path"] == "/models/m" and flags["--port"] == "31000" and flags["--tp-size"] == "2"
    assert flags["--mem-fraction-static"] == "0.3" and flags["--random-seed"] == "7"
    assert "--enable-memory-saver" in command and command[-2:] == ["--chunked-prefill-size", "4096"]
    assert "--enable-memory-saver" not in launch_command(SGLangRolloutConfig(sleep_servers=False), "/m", 1, 0)


def test_config_errors_name_the_key():
    for kwargs, key in (({"url": "localhost:1"}, "rollout.url"), ({"mem_fraction_static": 1.5}, "mem_fraction_static"),
                        ({"tp_size": 0}, "rollout.tp_size"), ({"url": "http://h:1", "offline": True}, "rollout.offline")):
        with pytest.raises(ValueError, match=key):
            SGLangRolloutConfig(**kwargs)


def test_weights_folder_is_a_loadable_model_folder(tmp_path):
    """What a sync writes loads with transformers as the model it came from (SGLang reads the same)."""
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    source = tmp_path / "source"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    write_weights_folder(((n, p.detach() + 1) for n, p in model.named_parameters()), str(tmp_path / "w"), str(source))
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "w")
    def config(path):
        return {k: v for k, v in AutoConfig.from_pretrained(path).to_dict().items() if k != "_name_or_path"}

    assert config(tmp_path / "w") == config(source)
    for (name, original), (_, loaded) in zip(model.named_parameters(), reloaded.named_parameters()):
        torch.testing.assert_close(loaded, original + 1, msg=name)


@pytest.mark.slow
def test_attached_to_a_server_speaking_sglangs_api_it_trains(tmp_path):
    cache = tmp_path / "models"
    server = ServerProcess("preset=tiny", f"model.cache_dir={cache}")
    try:
        rows = training_rows(train_tiny(tmp_path / "run", "rollout=sglang", f"rollout.url={server.url}",
                                        "trainer.total_steps=3", cache_dir=cache))
    finally:
        server.stop()
    assert len(rows) == 3
    assert all(row["training/rollout_probs_diff_mean"] < 1e-3 for row in rows)
    assert rows[-1]["rollout/server0/requests"] > 0


@pytest.mark.cuda("a tiny GRPO run on a real SGLang server, and on sglang.Engine in process")
@pytest.mark.skipif(not HAS_SGLANG, reason="needs SGLang (pip install 'sglang==0.5.23'): "
                    "a tiny GRPO run on a real SGLang server, and on sglang.Engine in process")
@pytest.mark.parametrize("offline", ["false", "true"])
def test_sglang_trains_on_the_gpu(tmp_path, offline):
    rows = training_rows(train_tiny(tmp_path / "run", "rollout=sglang", f"rollout.offline={offline}",
                                    "rollout.dtype=float32",
                                    "model.num_heads=2", "model.num_kv_heads=1", "trainer.total_steps=3"))
    assert len(rows) == 3
    assert all(row["training/rollout_probs_diff_mean"] < 1e-3 for row in rows)
