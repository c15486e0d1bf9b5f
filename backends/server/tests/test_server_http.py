"""``rlloom serve`` as a real process, driven over HTTP by aiohttp and by the ``rollout=server``
client engine: schema errors, limits, load balancing, a server killed mid-use, weight updates."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
import torch
from rlloom import EngineSpec, SamplingParams
from rlloom_enginekit.prompts import left_pad

from rlloom_serverkit.client import ServerError, ServerRolloutConfig, ServerRolloutEngine

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16], [17, 18, 19], [20], [21, 22]]


def post(url: str, body, raw: bool = False) -> tuple[int, object]:
    data = body if raw else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def model_path(url: str) -> str:
    with urllib.request.urlopen(url + "/get_model_info", timeout=30) as response:
        return json.loads(response.read())["model_path"]


def client(*urls: str, **cfg) -> ServerRolloutEngine:
    return ServerRolloutEngine(ServerRolloutConfig(urls=list(urls), **cfg),
                               EngineSpec(model_path(urls[0]), "rollout", seed=0))


def prompt_batch():
    from rlloom import Batch

    ids, mask = left_pad(PROMPTS)
    return Batch({"prompts": ids, "prompt_mask": mask}, batch_size=len(PROMPTS))


def test_bad_requests_get_400_naming_the_field(start_server):
    server = start_server()
    assert post(server.url + "/generate", b"{not json", raw=True)[0] == 400
    status, answer = post(server.url + "/generate", {"input_ids": [1], "sampling_params": {"top_k": 0}})
    assert status == 400 and "sampling_params.top_k" in answer["error"]["message"]
    status, answer = post(server.url + "/update_weights_from_disk", {"model_path": "/no/such/folder"})
    assert status == 400 and answer["success"] is False and "/no/such/folder" in answer["message"]
    status, answer = post(server.url + "/update_weights_from_tensor", {"serialized_named_tensors": ["%%%"]})
    assert status == 400 and "serialized_named_tensors[0]" in answer["message"]


def test_concurrency_limit_and_timeout(start_server):
    server = start_server("--max-concurrency", "1", "--request-timeout-s", "30")
    body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}}

    async def burst():
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async def one():
                async with session.post(server.url + "/generate", json=body) as response:
                    return response.status
            return await asyncio.gather(*(one() for _ in range(8)))

    statuses = asyncio.run(burst())
    assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}
    slow = start_server("--request-timeout-s", "0.001")
    status, answer = post(slow.url + "/generate", body)
    assert status == 504 and "request_timeout_s" in answer["error"]["message"]


def test_two_servers_share_the_load_and_answer_alike(start_server):
    """Randomness is keyed by (seed, prompt index, response), so which server answers a prompt does
    not change its samples: one server and two give the same batch, even when the second serves one
    prompt per engine call. Streamed (``trainer.stream_groups``), the groups of two jobs come back as they are
    answered: the first while the second server still has engine calls to run (one prompt each), which add
    their decode steps to the servers' counts when they end (answered only once all are, it would see the
    final counts)."""
    from rlloom_enginekit.stream import generate_groups

    first, second = start_server(), start_server("--max-batch-prompts", "1")
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=3)
    alone = client(first.url).generate(prompt_batch(), sampling)
    both = client(first.url, second.url)
    shared = both.generate(prompt_batch(), sampling)
    assert all(count > 0 for count in both.requests_served), both.requests_served
    assert torch.equal(alone["responses"], shared["responses"])
    torch.testing.assert_close(alone["rollout_log_probs"], shared["rollout_log_probs"])
    long = SamplingParams(n=8, temperature=1.0, max_new_tokens=32, ignore_eos=True, seed=3)
    jobs = [(prompt_batch().reorder(list(range(4))), long), (prompt_batch().reorder(list(range(4, 8))), long)]
    arrived, steps_at_first = [], []

    def received(job: int, row: int, _group) -> None:
        if not arrived:
            steps_at_first.append(sum(decode_steps(url) for url in (first.url, second.url)))
        arrived.append((job, row))

    generate_groups(both, jobs, received)
    assert sorted(arrived) == [(job, row) for job in (0, 1) for row in range(4)]
    assert steps_at_first[0] < sum(decode_steps(url) for url in (first.url, second.url)), steps_at_first


def test_a_killed_server_is_retried_on_the_other_then_named_when_all_are_down(start_server):
    first, second = start_server(), start_server()
    engine = client(first.url, second.url, backoff_s=0.01)
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=5, seed=9)
    before = engine.generate(prompt_batch(), sampling)
    second.kill()
    after = engine.generate(prompt_batch(), sampling)
    assert engine.retried >= 1 and torch.equal(before["responses"], after["responses"])
    first.kill()
    with pytest.raises(ServerError, match="cannot reach " + first.url.replace(".", r"\.")):
        engine.generate(prompt_batch(), sampling)


def test_weights_from_tensor_and_from_disk_change_what_is_sampled(start_server, tmp_path):
    """Zeroing the LM head makes every token equally likely (log-prob = -log V): visible in the
    answers after an update pushed as tensors; the original weights come back from disk."""
    from rlloom_enginekit.safetensors_dir import read_safetensors_dir
    from transformers import AutoConfig

    server = start_server()
    engine = client(server.url)
    path = model_path(server.url)
    vocab = AutoConfig.from_pretrained(path).vocab_size
    weights = dict(read_safetensors_dir(path))
    head = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=4, seed=1)
    original = engine.generate(prompt_batch(), sampling)
    engine.update_weights([(head, torch.zeros_like(weights[head]))])
    flat = engine.generate(prompt_batch(), sampling)
    real = flat["response_mask"].bool()
    torch.testing.assert_close(flat["rollout_log_probs"][real],
                               torch.full((int(real.sum()),), -torch.log(torch.tensor(float(vocab)))))
    check_groups_stream_as_answered(engine, server.url)
    engine.load_weights_from_dir(path)
    again = engine.generate(prompt_batch(), sampling)
    assert torch.equal(original["responses"], again["responses"])


def decode_steps(url: str) -> int:
    """The decode steps the server at ``url`` has run (``/get_server_info``), counted as each engine call ends."""
    with urllib.request.urlopen(url + "/get_server_info", timeout=30) as response:
        return json.loads(response.read())["decode_steps"]


def check_groups_stream_as_answered(engine: ServerRolloutEngine, url: str) -> None:
    """Rows stopping at many lengths (every token equally likely, one id in 32 a stop id): the groups of a
    streamed call (``trainer.stream_groups``: :func:`rlloom_enginekit.stream.generate_groups`) are handed on one
    by one as the server answers them, the first while the server still decodes the call (the engine adds a
    call's decode steps to its count when the call ends: the first group's count is lower than the count after
    the streamed call; answered at the call's end, it would equal it), each prompt once, each what the batch call
    gives that prompt."""
    from rlloom_enginekit.stream import generate_groups

    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=200, seed=5, stop_token_ids=tuple(range(0, 256, 32)))
    sent = []
    generate_groups(engine, [(prompt_batch(), sampling)], lambda _job, row, group: sent.append(
        (row, group, decode_steps(url))))
    after = decode_steps(url)
    whole = engine.generate(prompt_batch(), sampling)
    assert sorted(row for row, _, _ in sent) == list(range(len(PROMPTS)))
    assert sent[0][2] < after, ([steps for _, _, steps in sent], after)
    for row, group, _ in sent:
        lengths = group["response_mask"].sum(1).tolist()
        assert [group["responses"][j, : lengths[j]].tolist() for j in range(2)] == [
            whole["responses"][2 * row + j, : int(whole["response_mask"][2 * row + j].sum())].tolist()
            for j in range(2)]


def test_generate_one_and_sleep_round_trip(start_server):
    server = start_server()
    engine = client(server.url)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=4, first_prompt=2)
    batch = engine.generate(prompt_batch(), SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=4))
    answer = asyncio.run(engine.generate_one(PROMPTS[2], sampling))
    lengths = batch["response_mask"].sum(1).tolist()
    assert answer.token_ids == [batch["responses"][r, : lengths[r]].tolist() for r in (4, 5)]
    engine.sleep()
    with pytest.raises(ServerError, match="asleep"):
        engine.generate(prompt_batch(), sampling)
    engine.wake_up()
    assert engine.generate(prompt_batch(), sampling)["responses"].shape[0] == 2 * len(PROMPTS)
