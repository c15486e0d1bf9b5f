"""The ``vllm`` rollout engine on a real vLLM engine (in-process, CPU) over the tiny Qwen2 model.

References come from the FSDP train engine (teacher-forced log-probs of the same tokens) and from
facts computed here (shapes, masks, first stop token).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import mmap
import os
import threading

import pytest
import torch
from rlloom import Batch, EngineSpec, SamplingParams
from rlloom_enginekit.lora import LoraConfig
from rlloom_enginekit.resharder import InProcessResharder, InProcessResharderConfig
from rlloom_fsdp.config import FSDPConfig
from rlloom_fsdp.engine import FSDPTrainEngine
from rlloom_models.config import TinyModelConfig
from rlloom_models.tiny import tiny_model_path
from rlloom_resharders import SafetensorsResharder, SafetensorsResharderConfig
from rlloom_serverkit.client import ServerRolloutEngine
from rlloom_serverkit.config import ServerRolloutConfig

from rlloom_vllm import VLLMRolloutConfig, VLLMRolloutEngine
from rlloom_vllm.names import NameMap

PROMPTS = ["Q: pick a digit\nA:", "Say hi:", "What comes after 3? Answer:"]
_libc = ctypes.CDLL(None, use_errno=True)


def resident_kv_cache_bytes(worker) -> int:
    """Bytes of the whole pages inside the worker's KV-cache storages that are resident in RAM (``mincore``): what
    sleep must release, measured on those pages alone, whatever else the process allocates or frees meanwhile."""
    page, resident, seen = mmap.PAGESIZE, 0, set()
    for tensor in worker.model_runner.kv_caches:
        storage = tensor.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        first, last = -(-start // page) * page, (start + size) // page * page
        if start in seen or last <= first:
            continue
        seen.add(start)
        pages = (ctypes.c_ubyte * ((last - first) // page))()
        if _libc.mincore(ctypes.c_void_p(first), ctypes.c_size_t(last - first), pages) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        resident += sum(flag & 1 for flag in pages) * page
    return resident


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    # head size 32: vLLM's CPU attention has no kernel for the default tiny model's 16
    cfg = TinyModelConfig(num_heads=2, num_kv_heads=1, cache_dir=str(tmp_path_factory.mktemp("vllm-models")))
    return tiny_model_path(cfg)


@pytest.fixture(scope="module")
def engines(model_path):
    torch.set_num_threads(1)
    # with LoRA slots (rank <= 8): the engine generates with its base weights until an adapter is loaded (the last test)
    rollout = VLLMRolloutEngine(VLLMRolloutConfig(max_model_len=128, max_lora_rank=8),
                                EngineSpec(model_path, "rollout", 0))
    actor = FSDPTrainEngine(FSDPConfig(lr=1e-2, micro_batch_size=6), EngineSpec(model_path, "actor", 0, 10))
    ref = FSDPTrainEngine(FSDPConfig(), EngineSpec(model_path, "ref", 0, 10))
    yield rollout, actor, ref
    for engine in (rollout, ref, actor):
        engine.close()


def prompt_batch(tokenizer, texts=PROMPTS) -> Batch:
    """Left-padded byte-token prompts with a per-row object field."""
    rows = [tokenizer(text)["input_ids"] for text in texts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
    return Batch({"prompts": ids, "prompt_mask": mask}, {"prompt_text": texts})


def test_generate_contract(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer)
    out = rollout.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=1))
    assert len(out) == 9 and out.meta["temperature"] == 1.0
    assert out["responses"].dtype == torch.long and out["rollout_log_probs"].dtype == torch.float32
    assert out["responses"].shape == out["response_mask"].shape == out["rollout_log_probs"].shape == (9, 6)
    assert list(out["prompt_text"]) == [text for text in PROMPTS for _ in range(3)]
    assert torch.equal(out["prompts"], prompts["prompts"].repeat_interleave(3, dim=0))
    mask = out["response_mask"]
    # no stop token is likely in 6 draws from ~259 near-uniform tokens: every row runs to the limit
    assert bool((mask == 1).all())
    assert bool((out["rollout_log_probs"] < 0).all())


def test_stop_token_ends_the_response_and_is_kept(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    full = rollout.generate(prompts, greedy)
    stop = int(full["responses"][0, 2])  # make the 3rd greedy token of row 0 a stop token
    saved = rollout.stop_ids
    rollout.stop_ids = [stop]
    try:
        cut = rollout.generate(prompts, greedy)
    finally:
        rollout.stop_ids = saved
    for row in range(len(prompts)):
        tokens = full["responses"][row].tolist()
        expected = tokens.index(stop) + 1 if stop in tokens else len(tokens)
        assert int(cut["response_mask"][row].sum()) == expected
        assert cut["responses"][row, :expected].tolist() == tokens[:expected]
        assert bool((cut["responses"][row, expected:] == rollout.pad_id).all())
        assert bool((cut["rollout_log_probs"][row, expected:] == 0).all())
    assert int(cut["response_mask"][0].sum()) <= 3


def test_ignore_eos_runs_every_response_to_max_new_tokens(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    full = rollout.generate(prompts, greedy)
    saved = rollout.stop_ids
    rollout.stop_ids = [int(full["responses"][0, 2])]  # the 3rd greedy token of row 0 now stops it
    try:
        cut = rollout.generate(prompts, greedy)
        forced = rollout.generate(prompts, dataclasses.replace(greedy, ignore_eos=True))
        params = rollout.vllm_sampling(dataclasses.replace(greedy, ignore_eos=True), 1, 0)
    finally:
        rollout.stop_ids = saved
    assert int(cut["response_mask"][0].sum()) <= 3
    assert bool((forced["response_mask"] == 1).all())  # every row runs to max_new_tokens
    assert forced["responses"][0, :3].tolist() == full["responses"][0, :3].tolist()
    assert params.ignore_eos and not params.stop_token_ids  # vLLM's own EOS check is off too


def test_a_calls_stop_token_ids_end_its_responses_even_with_ignore_eos(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8, ignore_eos=True)
    full = rollout.generate(prompts, greedy)
    stop = int(full["responses"][0, 2])  # the 3rd greedy token of row 0
    cut = rollout.generate(prompts, dataclasses.replace(greedy, stop_token_ids=(stop,)))
    for row in range(len(prompts)):
        tokens = full["responses"][row].tolist()
        expected = tokens.index(stop) + 1 if stop in tokens else len(tokens)
        assert cut["responses"][row, : int(cut["response_mask"][row].sum())].tolist() == tokens[:expected]
    assert int(cut["response_mask"][0].sum()) <= 3


def test_seeds(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer, [PROMPTS[0], PROMPTS[0]])  # the same prompt twice
    draw = lambda seed: rollout.generate(prompts, SamplingParams(n=2, max_new_tokens=8, seed=seed))["responses"]
    first = draw(7)
    assert torch.equal(first, draw(7))
    assert not torch.equal(first, draw(8))
    # four samples of one prompt in one call: all different (no noise shared between requests)
    assert len({tuple(row.tolist()) for row in first}) == 4


def test_a_call_split_by_prompts_samples_what_the_whole_call_does(engines):
    # Request seeds are the call's seed sequence at each prompt's index in the whole call, so the
    # second piece, told it starts at prompt 1, gets the seeds the whole call gave prompts 1 and 2.
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer, [PROMPTS[0], PROMPTS[0], PROMPTS[0]])
    sampling = SamplingParams(n=2, max_new_tokens=8, seed=5)
    whole = rollout.generate(prompts, sampling)
    tail = rollout.generate(prompt_batch(rollout.tokenizer, [PROMPTS[0], PROMPTS[0]]),
                            dataclasses.replace(sampling, first_prompt=1))
    width = tail["responses"].shape[1]
    assert torch.equal(tail["response_mask"], whole["response_mask"][2:, :width])
    assert torch.equal(tail["responses"] * tail["response_mask"], (whole["responses"] * whole["response_mask"])[2:, :width])
    unshifted = rollout.generate(prompt_batch(rollout.tokenizer, [PROMPTS[0], PROMPTS[0]]), sampling)
    assert torch.equal(unshifted["responses"][:2], whole["responses"][:2, :unshifted["responses"].shape[1]])


def test_concurrent_requests_return_the_batch_calls_samples(engines):
    """generate_one through vLLM's engine loop: 12 requests in flight give what one batch call on
    the same prompts gives (tokens exactly, log-probs to float rounding), greedy n > 1 included."""
    import asyncio

    rollout, _, _ = engines
    texts = PROMPTS * 4
    prompts = prompt_batch(rollout.tokenizer, texts)
    ids = [rollout.tokenizer(text)["input_ids"] for text in texts]
    for sampling in (SamplingParams(n=2, max_new_tokens=8, seed=3), SamplingParams(n=2, temperature=0, max_new_tokens=8)):
        batch = rollout.generate(prompts, sampling)

        async def requests():
            return await asyncio.gather(*(rollout.generate_one(row, dataclasses.replace(sampling, first_prompt=i))
                                          for i, row in enumerate(ids)))

        lengths = batch["response_mask"].sum(1).tolist()
        for i, answer in enumerate(asyncio.run(requests())):
            for j in range(2):
                row = 2 * i + j
                assert answer.token_ids[j] == batch["responses"][row, : lengths[row]].tolist()
                torch.testing.assert_close(torch.tensor(answer.log_probs[j]),
                                           batch["rollout_log_probs"][row, : lengths[row]], atol=1e-4, rtol=0)
                assert answer.finish_reasons[j] == ("length" if lengths[row] == 8 else "stop")


def test_a_short_request_joins_a_running_one_and_finishes_first(engines):
    """Continuous batching: a 2-token request sent while an 80-token one is generating (a few steps
    in) is answered before it, not after."""
    import asyncio

    rollout, _, _ = engines
    prompt = rollout.tokenizer(PROMPTS[0])["input_ids"]
    finished = []

    async def timed(name, sampling):
        await rollout.generate_one(prompt, sampling)
        finished.append(name)

    async def both():
        long = asyncio.ensure_future(timed("long", SamplingParams(max_new_tokens=80, ignore_eos=True, seed=1)))
        for _ in range(4):  # the engine loop yields between steps: the long request is a few tokens in
            await asyncio.sleep(0)
        assert not long.done()
        await asyncio.gather(long, timed("short", SamplingParams(max_new_tokens=2, ignore_eos=True, seed=1)))

    asyncio.run(both())
    assert finished == ["short", "long"]


@pytest.mark.parametrize("top_k, top_p", [(3, 1.0), (-1, 0.5)])
def test_filtered_sampling_reports_no_rollout_log_probs(engines, top_k, top_p):
    # vLLM can only report the filtered distribution's log-probs, not the contract's: none rather than wrong.
    rollout, _, _ = engines
    out = rollout.generate(prompt_batch(rollout.tokenizer),
                           SamplingParams(n=2, temperature=0.7, top_k=top_k, top_p=top_p, max_new_tokens=6, seed=3))
    assert "rollout_log_probs" not in out
    assert out["response_mask"].sum(dim=1).min() >= 1 and len(out) == 2 * len(PROMPTS)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_log_probs_match_the_train_engine(engines, temperature):
    rollout, actor, _ = engines
    out = rollout.generate(prompt_batch(rollout.tokenizer),
                           SamplingParams(n=2, temperature=temperature, max_new_tokens=8, seed=3))
    assert out.meta["temperature"] == (temperature or 1.0)
    trainer = actor.compute_log_probs(out)["log_probs"]
    mask = out["response_mask"].bool()
    assert int(mask.sum()) > 0
    assert float((trainer - out["rollout_log_probs"]).abs()[mask].max()) < 1e-3


def test_trainer_names_map_onto_every_engine_parameter(engines):
    rollout, actor, _ = engines
    covered: set[str] = set()
    names = [name for name, _ in rollout.names.stream(actor.named_weights(), covered)]
    assert rollout.names.missing(covered) == []
    assert "model.layers.0.self_attn.q_proj.weight" in names
    assert "model.layers.0.self_attn.qkv_proj.weight" in covered
    with pytest.raises(ValueError, match="model.layers.0.attn.bogus"):
        list(NameMap(rollout.names.engine_names).stream([("model.layers.0.attn.bogus", torch.zeros(1))], set()))


def test_prompt_longer_than_max_model_len_is_refused(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer, ["x" * 125])
    with pytest.raises(ValueError, match="max_model_len=128"):
        rollout.generate(prompts, SamplingParams(max_new_tokens=8))


def test_sleep_frees_the_kv_cache_and_wake_up_restores_generation(engines):
    rollout, _, _ = engines
    prompts = prompt_batch(rollout.tokenizer)
    sampling = SamplingParams(n=2, max_new_tokens=6, seed=11)
    before = rollout.generate(prompts, sampling)
    assert rollout.llm.collective_rpc(resident_kv_cache_bytes)[0] > 0  # generating touched the KV cache
    rollout.sleep()
    assert rollout.llm.collective_rpc(resident_kv_cache_bytes)[0] == 0  # every KV-cache page left RAM
    with pytest.raises(RuntimeError, match="asleep"):
        rollout.generate(prompts, sampling)
    rollout.wake_up()
    after = rollout.generate(prompts, sampling)
    assert torch.equal(before["responses"], after["responses"])
    assert torch.allclose(before["rollout_log_probs"], after["rollout_log_probs"], atol=1e-5)
    assert rollout.metrics()["rollout/rss_gb/asleep"] < rollout.metrics()["rollout/rss_gb/before_sleep"]


def advantage_loss(micro, outputs, stats):
    """−Σ A·log π / tokens: push up responses with A > 0."""
    mask = micro["response_mask"].float()
    loss = -(micro["advantages"] * outputs["log_probs"] * mask).sum() / stats.num_tokens
    return loss, {"pg_loss": float(loss.detach())}


@pytest.mark.parametrize("resharder", [InProcessResharder(InProcessResharderConfig()),
                                       SafetensorsResharder(SafetensorsResharderConfig())],
                         ids=["in_process", "safetensors"])
def test_weight_sync_makes_vllm_follow_the_trainer(engines, resharder):
    rollout, actor, ref = engines
    batch = rollout.generate(prompt_batch(rollout.tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=5))
    batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * batch["response_mask"].float()
    actor.train_step(batch, advantage_loss)

    stats = resharder.sync(actor, rollout)
    expected_bytes = sum(t.numel() * t.element_size() for _, t in actor.named_weights())
    assert stats.num_bytes == expected_bytes and stats.num_tensors == len(list(actor.named_weights()))
    assert stats.seconds > 0

    greedy = rollout.generate(prompt_batch(rollout.tokenizer), SamplingParams(temperature=0.0, max_new_tokens=8))
    mask = greedy["response_mask"].bool()
    new = actor.compute_log_probs(greedy)["log_probs"]
    old = ref.compute_log_probs(greedy)["log_probs"]
    assert float((new - greedy["rollout_log_probs"]).abs()[mask].max()) < 1e-3
    assert float((old - greedy["rollout_log_probs"]).abs()[mask].max()) > 1e-2


def test_adapter_sync_sends_the_base_once_then_adapters_vllm_applies(engines, model_path, tmp_path):
    """resharder.lora_sync=adapter into vLLM's LoRA slots: the first sync sends W0 (the rollout holds the previous
    test's trained weights) and the adapters, later ones the adapters alone (rank 1: <= 5 % of W0's bytes), each under
    a new name; after every sync vLLM's log-probs are the LoRA actor's, and they change from one sync to the next.
    The adapter stays loaded: this test and the next come last of those using the engine."""
    rollout, _, _ = engines
    actor = FSDPTrainEngine(FSDPConfig(lr=5e-2, micro_batch_size=6, lora=LoraConfig(rank=1, alpha=4.0)),
                            EngineSpec(model_path, "actor", 0, 10))
    resharder = InProcessResharder(InProcessResharderConfig(lora_sync="adapter", adapter_dir=str(tmp_path)))
    base_bytes = sum(tensor.numel() * tensor.element_size() for _, tensor in actor.base_weights())
    adapter_bytes = sum(p.numel() * p.element_size() for name, p in actor.model.named_parameters() if ".lora_" in name)
    names, previous = [], None
    try:
        for sync in range(2):
            batch = rollout.generate(prompt_batch(rollout.tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=sync))
            batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * batch["response_mask"].float()
            actor.train_step(batch, advantage_loss)
            stats = resharder.sync(actor, rollout)
            assert stats.num_bytes == (base_bytes if sync == 0 else 0) + adapter_bytes, sync
            names.append(rollout.adapter.lora_name)
            assert os.listdir(tmp_path) == [names[-1]]  # the previous adapter's folder is gone
            check = rollout.generate(prompt_batch(rollout.tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=9))
            mask = check["response_mask"].bool()
            trained = actor.compute_log_probs(check)["log_probs"]
            assert float((trained - check["rollout_log_probs"]).abs()[mask].max()) < 1e-3, sync
            if previous is not None:  # the policy the rollout samples moved with the second update
                gap = actor.compute_log_probs(previous)["log_probs"] - previous["rollout_log_probs"]
                assert float(gap.abs()[previous["response_mask"].bool()].max()) > 1e-3
            previous = check
        assert adapter_bytes <= 0.05 * base_bytes and len(set(names)) == 2
    finally:
        resharder.close()
        actor.close()


@contextlib.contextmanager
def served(engine, model_path: str):
    """``rlloom serve``'s app over ``engine`` on a thread of its own (the module's engine: no second vLLM starts);
    yields its URL. Its runner is stopped, never cleaned up, since that would close the engine."""
    from aiohttp import web
    from rlloom_server.app import RolloutServer
    from rlloom_server.config import ServeConfig
    from rlloom_server.door import server_limits

    cfg = ServeConfig(port=0)
    server = RolloutServer(engine, cfg, model_path, "vllm", server_limits(cfg, model_path, engine))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(server.app(), access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(site.stop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        server.scheduler.close()


def test_adapter_sync_through_rlloom_serve(engines, model_path, tmp_path):
    """rollout=server over ``rlloom serve rollout=vllm``: the base goes through /update_weights_from_tensor, each
    adapter through /load_lora_adapter, and the served log-probs are the LoRA actor's after every sync."""
    rollout, _, _ = engines
    actor = FSDPTrainEngine(FSDPConfig(lr=5e-2, micro_batch_size=6, lora=LoraConfig(rank=8, alpha=16.0)),
                            EngineSpec(model_path, "actor", 0, 10))
    resharder = InProcessResharder(InProcessResharderConfig(lora_sync="adapter", adapter_dir=str(tmp_path)))
    try:
        with served(rollout, model_path) as url:
            client = ServerRolloutEngine(ServerRolloutConfig(urls=[url]), EngineSpec(model_path, "rollout", 0))
            for sync in range(2):
                batch = client.generate(prompt_batch(rollout.tokenizer),
                                        SamplingParams(n=2, max_new_tokens=8, seed=sync))
                batch["advantages"] = torch.tensor([1.0, -1.0] * 3).unsqueeze(1) * batch["response_mask"].float()
                actor.train_step(batch, advantage_loss)
                resharder.sync(actor, client)
                assert rollout.adapter.lora_name == client.adapter  # the served engine loaded the new adapter
                check = client.generate(prompt_batch(rollout.tokenizer), SamplingParams(n=2, max_new_tokens=8, seed=9))
                mask = check["response_mask"].bool()
                gap = actor.compute_log_probs(check)["log_probs"] - check["rollout_log_probs"]
                assert float(gap.abs()[mask].max()) < 1e-3, sync
    finally:
        resharder.close()
        actor.close()


def test_registered_through_the_entry_point():
    from rlloom.plugins.registry import Registry

    component = Registry().get("rollout", "vllm")
    assert component.distribution == "rlloom-vllm" and component.config is VLLMRolloutConfig
