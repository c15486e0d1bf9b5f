"""``rlloom train preset=tiny rollout=server`` against real ``rlloom serve`` processes."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest
from rlloom_trainer.testing import comparable_rows, train_tiny, training_rows

# The client's own counters, and the rollout-vs-trainer log-prob gap: the servers batch other prompts
# together than the in-process engine, which moves that gap in the tenth decimal (asserted < 1e-3).
CLIENT_COUNTERS = ("rollout/server", "rollout/retried_requests", "training/rollout_probs_diff")


def without_client_counters(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(CLIENT_COUNTERS)} for row in comparable_rows(rows)]


@pytest.mark.slow
def test_training_through_two_servers_equals_training_in_process(start_server, model_cache, tmp_path):
    """GRPO on the tiny preset with the rollout behind two hf servers: the weights reach the servers
    every step (rollout log-probs match the trainer's within 1e-3), both servers answer, and every
    other logged number (rewards, losses, validation) equals the same run with rollout=hf in the trainer's process."""
    first, second = start_server(), start_server()
    steps = ["trainer.total_steps=4", "trainer.test_freq=2"]
    served = train_tiny(tmp_path / "served", "rollout=server", f"rollout.urls=[{first.url},{second.url}]", *steps,
                        cache_dir=model_cache)
    local = train_tiny(tmp_path / "local", "rollout=hf", *steps, cache_dir=model_cache)
    rows = training_rows(served)
    assert len(rows) == 4
    assert all(row["training/rollout_probs_diff_mean"] < 1e-3 for row in rows)
    assert rows[-1]["rollout/server0/requests"] > 0 and rows[-1]["rollout/server1/requests"] > 0
    assert without_client_counters(served) == without_client_counters(local)


@pytest.mark.slow
def test_training_through_a_vllm_server(start_server, model_cache, tmp_path):
    """The same with vLLM (the CPU build) behind ``rlloom serve``: its weights follow the trainer's
    through /update_weights_from_tensor, so its log-probs match the trainer's within 1e-3."""
    model = ["model.num_heads=2", "model.num_kv_heads=1"]  # a head size vLLM's CPU attention supports
    server = start_server("rollout=vllm", "rollout.max_model_len=256", *model)
    rows = training_rows(train_tiny(tmp_path / "run", "rollout=server", f"rollout.urls=[{server.url}]",
                                    "trainer.total_steps=3", *model, cache_dir=model_cache))
    assert len(rows) == 3
    assert all(row["training/rollout_probs_diff_mean"] < 1e-3 for row in rows)
    assert rows[-1]["rollout/server0/requests"] > 0


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def greedy_log_probs(url: str) -> list[float]:
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}, "return_logprob": True}
    return [entry[0] for entry in post_json(url + "/generate", body)["meta_info"]["output_token_logprobs"]]


def push_another_runs_weights(url: str) -> None:
    """The served model with its (tied) embeddings x 20: sharp distributions, as a trained model's,
    far from the run's (loaded as another run would, with a version of its own)."""
    from rlloom_enginekit.safetensors_dir import read_safetensors_dir
    from safetensors.torch import save

    with urllib.request.urlopen(url + "/get_model_info", timeout=60) as response:
        path = json.loads(response.read())["model_path"]
    weights = dict(read_safetensors_dir(path))
    blob = save({"model.embed_tokens.weight": weights["model.embed_tokens.weight"] * 20})
    answer = post_json(url + "/update_weights_from_tensor", {
        "serialized_named_tensors": [base64.b64encode(blob).decode("ascii")], "weight_version": "another-run"})
    assert answer["success"], answer


@pytest.mark.slow
def test_a_run_attached_to_a_server_holding_other_weights_pushes_its_own_before_step_0(start_server, model_cache,
                                                                                       tmp_path):
    """A server holding another run's weights gets the run's starting weights before step 0: the
    run's validation at step 0 and its first step equal those of a run on a fresh server, and the
    rollout/trainer probability gap at step 1 is < 1e-3 (with nothing pushed it is far above)."""
    foreign, fresh = start_server(), start_server()
    push_another_runs_weights(foreign.url)
    assert greedy_log_probs(foreign.url) != greedy_log_probs(fresh.url)
    steps = ["trainer.total_steps=1"]  # with the validation before training (val_before_train)
    on_foreign = train_tiny(tmp_path / "foreign", "rollout=server", f"rollout.urls=[{foreign.url}]", *steps,
                            cache_dir=model_cache)
    on_fresh = train_tiny(tmp_path / "fresh", "rollout=server", f"rollout.urls=[{fresh.url}]", *steps,
                          cache_dir=model_cache)
    (step_1,) = training_rows(on_foreign)
    assert step_1["training/rollout_probs_diff_mean"] < 1e-3
    assert on_foreign[0]["step"] == 0 and any(key.startswith("val") for key in on_foreign[0])
    assert without_client_counters(on_foreign) == without_client_counters(on_fresh)
    assert greedy_log_probs(foreign.url) == greedy_log_probs(fresh.url)
