"""The rollout role in a process of its own (``rlloom_trainer.rollout_process``, how ``launcher=local`` places
it in an async mode): it generates what the in-process engine generates, and its failures reach the trainer
as errors naming what happened."""

from __future__ import annotations

import math
import os
import time
import signal

import pytest
import torch
from rlloom.types import EngineSpec, RoleSpec, SamplingParams
from rlloom_hf import HFRolloutConfig, HFRolloutEngine
from rlloom_trainer.rollout_process import RolloutProcess


def spec(model_path: str) -> RoleSpec:
    return RoleSpec("rollout", "rollout", "hf", HFRolloutConfig(), EngineSpec(model_path, "rollout", seed=3))


@pytest.fixture(scope="module")
def long_model_path(tmp_path_factory) -> str:
    """The tiny model with 4,096 positions: room for generations of 3,000 tokens (seconds)."""
    from rlloom_models.config import TinyModelConfig
    from rlloom_models.tiny import tiny_model_path

    cache = str(tmp_path_factory.mktemp("long"))
    return tiny_model_path(TinyModelConfig(cache_dir=cache, max_position_embeddings=4096))


def prompts():
    from rlloom.batch import Batch

    ids = torch.tensor([[65, 66, 67], [258, 68, 69]])
    return Batch({"prompts": ids, "prompt_mask": (ids != 258).long()})


def test_the_process_generates_what_the_engine_generates_in_process(tiny_model_path):
    sampling = SamplingParams(max_new_tokens=5, n=2, seed=11)
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    try:
        future = apart.submit_call("generate", (prompts(), sampling), {})
        theirs = future.result()
        start, end = future.span()
    finally:
        apart.close()
    ours = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", seed=3)).generate(prompts(), sampling)
    assert torch.equal(theirs["responses"], ours["responses"]) and start <= end
    assert torch.equal(theirs["rollout_log_probs"], ours["rollout_log_probs"])


def test_an_engine_that_fails_to_build_raises_its_error_in_the_trainer(tmp_path):
    with pytest.raises(Exception, match="no-model"):
        RolloutProcess(spec(str(tmp_path / "no-model")), threads=1)


def test_a_killed_rollout_process_is_named_not_waited_for(tiny_model_path):
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    os.kill(apart._process.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"the rollout process exited \(code -9\)"):
        apart.generate(prompts(), SamplingParams(max_new_tokens=2))
    apart.close()



def test_a_weight_update_waits_for_the_generation_in_flight_unless_partial_rollouts_are_on(long_model_path):
    """Without partial rollouts, zeroed weights submitted after a greedy generation take effect after it. With
    them on (at version 4), a greedy generation of up to 3,000 tokens (seconds), and 1 s into it zeroed
    weights labelled 5: the update does not wait, the rows resume under the zero model, whose argmax, token 0,
    is a stop id here, so each ends with one more token, of log-prob -log(vocabulary) (uniform), within its
    budget, one log-prob per token; versions 4 to 5, counted as interrupted and resumed. The next generation
    is version 5 throughout."""
    path = long_model_path
    short = SamplingParams(max_new_tokens=5, n=1, seed=11, temperature=0.0)
    sampling = SamplingParams(max_new_tokens=3000, n=2, temperature=0.0, ignore_eos=True, stop_token_ids=(0,))
    engine = HFRolloutEngine(HFRolloutConfig(), EngineSpec(path, "rollout", seed=3))
    zeroed = [(name, torch.zeros_like(tensor)) for name, tensor in engine.model.named_parameters()]
    apart = RolloutProcess(spec(path), threads=1)
    try:
        before = apart.submit_call("generate", (prompts(), short), {})
        apart.update_weights(zeroed)
        assert torch.equal(before.result()["responses"], engine.generate(prompts(), short)["responses"])
        apart.update_weights(list(engine.model.named_parameters()))
        apart.submit_call("partial_rollouts", (4,), {}).result()
        running = apart.submit_call("generate", (prompts(), sampling), {})
        time.sleep(1.0)
        apart.weight_version = 5
        apart.update_weights(zeroed)
        out = running.result()
        after = apart.generate(prompts(), sampling)
    finally:
        apart.close()
    lengths = out["response_mask"].sum(dim=1)
    assert 1 < int(lengths.min()) and int(lengths.max()) < 3000
    assert torch.equal(out["response_mask"].bool(), out["rollout_log_probs"] < 0)
    last = out["responses"].gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
    uniform = -math.log(engine.model.config.vocab_size)
    assert last.tolist() == [0] * 4 and torch.allclose(out["rollout_log_probs"].gather(
        1, (lengths - 1).unsqueeze(1)), torch.full((4, 1), uniform))
    assert out["weight_version"].tolist() == [4] * 4 and out["weight_version_max"].tolist() == [5] * 4
    assert out.meta["metrics"] == {"async/interrupted": 4.0, "async/resumed": 4.0}
    assert after["weight_version"].tolist() == [5] * 4 and after["responses"][:, 0].tolist() == [0] * 4


def test_partial_rollouts_on_an_engine_that_cannot_flag_withdrawn_rows_is_refused_naming_the_key():
    import queue

    from rlloom_trainer.rollout_process import Channel, Worker

    class Plain:  # generate_requests without the interrupted flags
        def generate_requests(self, prompts, sampling, cancelled=None): ...

    replies = Channel(queue.Queue())
    Worker(Plain(), replies).run((7, "partial_rollouts", (0,), {}))
    call_id, value, error, _span = replies.get(0)
    assert call_id == 7 and value is None and isinstance(error, TypeError)
    assert "trainer.partial_rollout=true" in str(error) and "Plain" in str(error)


def test_streamed_jobs_come_back_group_by_group_as_their_own_calls_would_generate_them(tiny_model_path):
    """Two ``generate_stream`` jobs (seeds 5 and 6) submitted back to back: every prompt's group comes back once,
    equal to its rows of the job's own ``generate`` in process; a weight update and a job that fail are raised by
    ``streamed``."""
    from rlloom.batch import Batch
    from rlloom_enginekit.stream_calls import GENERATE_STREAM, STREAM_GROUPS

    jobs = []
    for seed, uids in ((5, ["draw1-0", "draw1-1"]), (6, ["draw2-0", "draw2-1"])):
        batch = prompts()
        sampling = SamplingParams(max_new_tokens=6, n=2, seed=seed)
        jobs.append((Batch(dict(batch.tensors.items()), {"uid": uids}), sampling))
    apart = RolloutProcess(spec(tiny_model_path), threads=1)
    try:
        assert apart.submit_call(STREAM_GROUPS, (0,), {}).result() is None
        for job in jobs:
            apart.submit_call(GENERATE_STREAM, job, {})
        groups = []
        while len(groups) < 4:
            groups += apart.streamed(wait=True)
        apart.update_weights([("nope", torch.zeros(1))])
        with pytest.raises(ValueError, match="no weight named 'nope'"):  # a failed update, raised once it ran
            while True:
                apart.streamed(wait=True)
        right_padded = Batch({"prompts": torch.tensor([[65, 66]]), "prompt_mask": torch.tensor([[1, 0]])})
        apart.submit_call(GENERATE_STREAM, (right_padded, SamplingParams(max_new_tokens=6, n=2, seed=1)), {})
        with pytest.raises(ValueError, match="left-padded"):
            while True:
                apart.streamed(wait=True)
    finally:
        apart.close()
    engine = HFRolloutEngine(HFRolloutConfig(), EngineSpec(tiny_model_path, "rollout", seed=3))
    assert sorted(group["uid"][0] for group in groups) == ["draw1-0", "draw1-1", "draw2-0", "draw2-1"]
    for group in groups:
        draw, row = (int(part) for part in group["uid"][0].removeprefix("draw").split("-"))
        own = engine.generate(*jobs[draw - 1]).reorder([2 * row, 2 * row + 1])
        width = group["responses"].shape[1]
        assert torch.equal(group["responses"], own["responses"][:, :width])
        assert list(group["uid"]) == [group["uid"][0]] * 2


@pytest.mark.timeout(120)  # bounds the test: before these errors were sent back, the first three calls hung
def test_what_cannot_cross_is_an_error_naming_it_and_a_wait_is_for_its_own_call(long_model_path):
    """One process (its start is the test's cost). A prompt batch carrying lambdas: the submit raises, naming
    the request and what failed to pickle. An async engine method called through the process answers a
    coroutine: the trainer raises, naming the reply. A request the process cannot unpickle (its class cannot be
    imported there): the trainer raises the process's error. Then, without partial rollouts, a short generation,
    a long one (1,000 tokens: seconds) and a weight update naming a weight the model lacks: the short one's
    result is read while the long one still runs (the update queued behind it is not waited for); a second
    update is queued at once, and a third waits for the first to be answered (at most two queued), raising its
    error, naming the weight. The process answers the next call each time."""
    from pickle import PicklingError

    from rlloom.batch import Batch

    from transformers import AutoConfig

    unsendable = Batch(dict(prompts().tensors.items()), {"uid": [lambda: 0, lambda: 1]})
    ones = [("model.norm.weight", torch.ones(AutoConfig.from_pretrained(long_model_path).hidden_size))]
    short = SamplingParams(max_new_tokens=2, n=1)
    long = SamplingParams(max_new_tokens=1000, n=1, temperature=0.0, ignore_eos=True)
    apart = RolloutProcess(spec(long_model_path), threads=1)
    try:
        with pytest.raises(PicklingError, match=r"the request generate \(call 0\) cannot be pickled.*lambda"):
            apart.submit_call("generate", (unsendable, short), {}).result()
        with pytest.raises(PicklingError, match=r"the reply to generate_one \(call 1\) cannot be pickled.*coroutine"):
            apart.submit_call("generate_one", ([65, 66], short), {}).result()
        assert apart.generate(prompts(), short)["responses"].shape[0] == 2
        with pytest.raises(RuntimeError, match="could not unpickle a request: ModuleNotFoundError.*only_here"):
            apart.submit_call("generate", (prompts(), short, unreadable_here()), {}).result()
        assert apart.generate(prompts(), short)["responses"].shape[0] == 2
        first, running = (apart.submit_call("generate", (prompts(), sampling), {}) for sampling in (short, long))
        apart.update_weights([("nope", torch.zeros(1))])
        first.result()
        read = time.time()
        apart.update_weights(ones)  # a second load may wait in the queue
        with pytest.raises(ValueError, match="update_weights: the model has no weight named 'nope'"):
            apart.update_weights(ones)  # a third waits for the first to be answered: its error
        raised = time.time()
        assert read < running.span()[1] <= raised  # the short result read during the long one, the third after
        assert apart.generate(prompts(), short)["responses"].shape[0] == 2
    finally:
        apart.close()


def unreadable_here() -> object:
    """An object of a class from a module that exists in this process only: it pickles here, and cannot be
    unpickled in the rollout process."""
    import sys
    import types

    module = sys.modules.setdefault("only_here", types.ModuleType("only_here"))
    module.Here = type("Here", (), {"__module__": "only_here"})
    return module.Here()


def test_a_streamed_group_that_cannot_be_pickled_answers_its_call_with_the_error():
    """A ``generate_stream`` job whose prompts carry lambdas (in process, so the request is not pickled): its
    first group cannot be sent, and the job is answered with the error naming the group."""
    import queue
    from pickle import PicklingError

    from rlloom.batch import Batch
    from rlloom_enginekit.stream_calls import GENERATE_STREAM
    from rlloom_trainer.rollout_process import Channel, Worker

    class Finishing:  # rlloom_enginekit.stream.StreamsRows: every row done at once, with one token
        reports_finished_rows, pad_id = True, 0

        def generate_requests(self, prompts, sampling, cancelled=None, finished=None):
            rows = list(range(len(prompts) * sampling.n))
            finished(rows, [[5]] * len(rows), [[-1.0]] * len(rows))

    replies = Channel(queue.Queue())
    job = (Batch(dict(prompts().tensors.items()), {"uid": [lambda: 0, lambda: 1]}), SamplingParams(n=2, seed=1))
    Worker(Finishing(), replies).run((3, GENERATE_STREAM, job, {}))
    call_id, value, error, _span = replies.get(0)
    assert call_id == 3 and value is None and isinstance(error, PicklingError)
    assert "the streamed group of row 0 of job 0 cannot be pickled" in str(error) and "lambda" in str(error)
    with pytest.raises(queue.Empty):
        replies.get(0)
