"""Weight versions and pausing on a real ``rlloom serve`` process, over HTTP: ``/get_weight_version``,
``meta_info.weight_version``, ``weight_version`` on the updates, ``/pause_generation`` and
``/continue_generation``; and the ``rollout=server`` client refusing answers from weights it did not push."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request

import pytest
from rlloom import SamplingParams
from safetensors.torch import save
from test_server_http import client, model_path, post, prompt_batch

BODY = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3, "temperature": 0.0}}


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def a_weight(url: str) -> dict:
    """One tensor of the served model, as ``/update_weights_from_tensor`` takes it."""
    from rlloom_enginekit.safetensors_dir import read_safetensors_dir

    name, tensor = next(iter(read_safetensors_dir(model_path(url))))
    return {"serialized_named_tensors": [base64.b64encode(save({name: tensor})).decode("ascii")]}


def served_version(url: str) -> str:
    version = get(url + "/get_weight_version")["weight_version"]
    assert get(url + "/get_model_info")["weight_version"] == version
    status, answer = post(url + "/generate", BODY)
    assert status == 200 and answer["meta_info"]["weight_version"] == version
    return version


def test_weight_versions_start_set_and_bump(start_server):
    server = start_server("--weight-version", "start")
    assert served_version(server.url) == "start"
    status, answer = post(server.url + "/update_weights_from_tensor", {**a_weight(server.url), "weight_version": "v7"})
    assert status == 200 and answer["success"] and "v7" in answer["message"]
    assert served_version(server.url) == "v7"
    assert post(server.url + "/update_weights_from_disk", {"model_path": model_path(server.url)})[0] == 200
    assert served_version(server.url) == "v7+1"
    assert post(server.url + "/update_weights_from_tensor", a_weight(server.url))[0] == 200
    assert served_version(server.url) == "v7+2"
    for bad in (7, ""):
        status, answer = post(server.url + "/update_weights_from_disk",
                              {"model_path": model_path(server.url), "weight_version": bad})
        assert status == 400 and "weight_version" in answer["message"]
    assert served_version(server.url) == "v7+2"
    # the hf engine takes no LoRA adapter: loading one is refused naming why; a request naming one gets 400
    status, answer = post(server.url + "/load_lora_adapter", {"lora_name": "a", "lora_path": model_path(server.url)})
    assert status == 400 and "rollout=hf cannot load LoRA adapters" in answer["message"], answer
    status, answer = post(server.url + "/generate", {**BODY, "lora_path": "a"})
    assert status == 400 and "lora_path='a' is not loaded" in answer["error"]["message"], answer


def test_a_paused_server_holds_requests_and_loads_weights_until_continued(start_server):
    """A request sent while paused is not answered (still pending a second later); weights loaded
    meanwhile are the ones it is generated with, once generation continues."""
    server = start_server()
    assert post(server.url + "/pause_generation", {"mode": "bogus"})[0] == 400
    assert post(server.url + "/pause_generation", {"mode": "in_place"}) == (
        200, {"message": "Generation paused successfully.", "status": "ok"})

    async def held_then_answered():
        import aiohttp

        async with aiohttp.ClientSession() as session:
            async def generate():
                async with session.post(server.url + "/generate", json=BODY) as response:
                    return response.status, await response.json()
            request = asyncio.ensure_future(generate())
            done, _ = await asyncio.wait([request], timeout=1.0)
            assert not done, "a request was answered while generation was paused"
            async with session.post(server.url + "/update_weights_from_tensor",
                                    json={**a_weight(server.url), "weight_version": "while-paused"}) as response:
                assert response.status == 200
            async with session.post(server.url + "/continue_generation") as response:
                assert response.status == 200
            return await request

    status, answer = asyncio.run(held_then_answered())
    assert status == 200 and answer["meta_info"]["weight_version"] == "while-paused"


def test_the_client_refuses_answers_from_weights_another_client_pushed(start_server):
    """``rollout=server`` names each push; once another client has pushed to the same server, the
    first client's next call raises instead of returning samples of weights that are not its own."""
    from rlloom_enginekit.safetensors_dir import read_safetensors_dir

    server = start_server()
    ours, theirs = client(server.url), client(server.url)
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=3, seed=2)
    weights = list(read_safetensors_dir(model_path(server.url)))
    ours.update_weights(weights)
    assert served_version(server.url) == ours.weight_version and ours.weight_version.startswith("rlloom-")
    ours.generate(prompt_batch(), sampling)
    theirs.load_weights_from_dir(model_path(server.url))
    with pytest.raises(RuntimeError, match="another client has loaded other weights"):
        ours.generate(prompt_batch(), sampling)


def test_a_call_withdrawn_through_cancelled_comes_back_with_its_tokens_so_far(start_server):
    """``trainer.partial_rollout`` through ``rollout=server``: 0.3 s into a call of 256 rows x 200 tokens the
    ``cancelled`` flags are set; the client pauses the server in mode ``abort`` (then continues it), and every row
    still decoding comes back flagged interrupted with its tokens so far (fewer than 200, some, as many log-probs),
    the first tokens the uninterrupted call samples; a row that had ended by then (a fast machine ends the server's
    first, smaller engine calls within 0.3 s) comes back whole and not flagged; the next call is whole. A request
    for one sample with ``response_index`` k draws sample k of a request for several."""
    import dataclasses
    import threading

    import torch
    from rlloom import Batch
    from rlloom_enginekit.prompts import RESPONSE_INDEX_FIELD, left_pad

    server = start_server()
    engine = client(server.url)
    ids, mask = left_pad([[5 + i, 6, 7] for i in range(32)])
    prompts = Batch({"prompts": ids, "prompt_mask": mask}, batch_size=32)
    sampling = SamplingParams(n=8, temperature=1.0, max_new_tokens=200, ignore_eos=True, seed=3)
    cancelled = torch.zeros(32, dtype=torch.bool)
    threading.Timer(0.3, lambda: cancelled.fill_(True)).start()
    cut = engine.generate_requests(prompts, sampling, cancelled)
    whole = engine.generate_requests(prompts, sampling)
    lengths = cut["response_mask"].sum(1)
    interrupted = cut["interrupted"]
    assert interrupted.any() and int(lengths[interrupted].max()) < 200 and int(lengths[interrupted].max()) > 0
    assert bool((lengths[~interrupted] == 200).all())
    assert torch.equal((cut["rollout_log_probs"] != 0).sum(1), lengths)
    assert torch.equal(cut["responses"] * cut["response_mask"], whole["responses"][:, : cut["responses"].shape[1]]
                       * cut["response_mask"])
    assert not whole["interrupted"].any() and bool((whole["response_mask"].sum(1) == 200).all())
    one = prompts.reorder([0])
    one[RESPONSE_INDEX_FIELD] = torch.tensor([5])
    fifth = engine.generate_requests(one, dataclasses.replace(sampling, n=1))
    assert torch.equal(fifth["responses"][0], whole["responses"][5])
