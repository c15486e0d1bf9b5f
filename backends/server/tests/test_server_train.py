"""``rlloom train preset=tiny rollout=server`` against real ``rlloom serve`` processes, in sync and async modes."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest
from rlloom_trainer.testing import comparable_rows, dumped_rollouts, train_tiny, training_rows

# The client's own counters, and the rollout-vs-trainer log-prob gap: the servers batch other prompts
# together than the in-process engine, which moves that gap in the tenth decimal (asserted < 1e-3).
CLIENT_COUNTERS = ("rollout/server", "rollout/retried_requests", "training/rollout_probs_diff")


def without_client_counters(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(CLIENT_COUNTERS)} for row in comparable_rows(rows)]


@pytest.mark.slow
def test_training_through_two_servers_equals_training_in_process(start_server, model_cache, tmp_path):
    """GRPO on the tiny preset with the rollout behind two hf servers: the weights reach the servers
    every step (rollout log-probs match the trainer's within 1e-3), both servers answer, and every
    other logged number (rewards, losses, validation) equals the same run with rollout=hf in the trainer's process;
    then the async modes through the same servers."""
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
    check_fully_async_through(first, second, tmp_path / "async", model_cache, "launcher.num_threads=2")
    check_streamed_through(first, second, tmp_path / "streamed", model_cache)
    check_partial_through(first, second, tmp_path / "partial", model_cache)


def served_version(url: str) -> str:
    with urllib.request.urlopen(url + "/get_weight_version", timeout=60) as response:
        return json.loads(response.read())["weight_version"]


@pytest.mark.slow
def test_fully_async_on_a_ray_rollout_pool_labels_the_servers_weights(ray_cluster, start_server, model_cache,
                                                                      tmp_path):
    """launcher=ray with the rollout (the client) on a pool of its own: the Ray worker loads each sync into the
    client labelled with its version, as the rollout process does under launcher=local."""
    first, second = start_server(), start_server()
    check_fully_async_through(first, second, tmp_path, model_cache, "launcher=ray", "+launcher.resource_pools.gen=1",
                              "+launcher.mapping.rollout=gen")


def check_fully_async_through(first, second, run_dir, model_cache, *placement: str) -> None:
    """trainer.async_mode=fully_async K=1 through the same two servers (the client in the rollout process, or
    where ``placement`` puts it): every trained sample, stamped with the version the servers answered with, is 0
    to K versions behind the trainer, generation ran ahead (some sample is K behind), the staleness metrics agree,
    the client's counters reach the step's metrics, and both servers end holding the last step's weights, named
    with its version."""
    steps = 4
    rows = training_rows(train_tiny(run_dir, "rollout=server", f"rollout.urls=[{first.url},{second.url}]",
                                    "trainer.async_mode=fully_async", "trainer.max_staleness=1",
                                    f"trainer.total_steps={steps}", "trainer.dump_rollouts=32", *placement,
                                    cache_dir=model_cache))
    assert len(rows) == steps
    ages = {step: [step - 1 - sample["weight_version"] for sample in dumped_rollouts(run_dir, step)]
            for step in range(1, steps + 1)}
    assert all(0 <= age <= 1 for step in ages for age in ages[step]), ages
    assert max(max(found) for found in ages.values()) == 1
    for step, row in enumerate(rows, start=1):
        assert row["async/staleness/max"] == max(ages[step]) and row["async/staleness/mean"] >= 0
    assert rows[-1]["rollout/server0/requests"] > 0 and rows[-1]["rollout/server1/requests"] > 0
    assert served_version(first.url).endswith(f"-v{steps}") and served_version(second.url) == served_version(first.url)


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


def check_streamed_through(first, second, run_dir, model_cache) -> None:
    """trainer.stream_groups=true (fully_async K=2) through the two servers: the client sends one request per
    prompt, alternating between the servers, and hands each group on as its answer arrives (the order of arrival:
    test_server_http.py). Every prompt of the 5 draws is trained exactly once, none dropped, every sample 0 to K
    versions behind."""
    steps = 5
    rows = training_rows(train_tiny(run_dir, "rollout=server", f"rollout.urls=[{first.url},{second.url}]",
                                    "trainer.async_mode=fully_async", "trainer.max_staleness=2",
                                    "trainer.stream_groups=true", f"trainer.total_steps={steps}",
                                    "trainer.dump_rollouts=32", "launcher.num_threads=2", cache_dir=model_cache))
    assert len(rows) == steps and all(row["async/dropped"] == 0 for row in rows)
    trained = {step: dumped_rollouts(run_dir, step) for step in range(1, steps + 1)}
    prompts = [uid for step in trained for uid in dict.fromkeys(sample["uid"] for sample in trained[step])]
    assert sorted(prompts) == sorted(f"draw{draw}-{row}" for draw in range(1, steps + 1) for row in range(4))
    assert all(0 <= step - 1 - sample["weight_version"] <= 2 for step in trained for sample in trained[step])


def check_partial_through(first, second, run_dir, model_cache) -> None:
    """trainer.partial_rollout=true (fully_async K=2, 64-token responses) through the two servers: weight updates
    withdraw the generation in flight (the client pauses the servers in mode abort), which resumes from its tokens
    so far under the new weights; every trained sample is at most K versions old by its oldest weights and never
    newer than the trainer by its newest, and some were interrupted and resumed."""
    steps = 6
    rows = training_rows(train_tiny(run_dir, "rollout=server", f"rollout.urls=[{first.url},{second.url}]",
                                    "trainer.async_mode=fully_async", "trainer.max_staleness=2",
                                    "trainer.partial_rollout=true", "sampling.max_new_tokens=64",
                                    "sampling.ignore_eos=true", f"trainer.total_steps={steps}",
                                    "trainer.dump_rollouts=32", "launcher.num_threads=2", cache_dir=model_cache))
    assert len(rows) == steps
    for step in range(1, steps + 1):
        for sample in dumped_rollouts(run_dir, step):
            assert 0 <= step - 1 - sample["weight_version"] <= 2 and sample["weight_version_max"] <= step - 1
    resumed = [sample for step in range(1, steps + 1) for sample in dumped_rollouts(run_dir, step)
               if sample["weight_version_max"] > sample["weight_version"]]
    assert resumed and any(row["async/interrupted"] > 0 and row["async/resumed"] > 0 for row in rows)
