"""Shared-prompt forward (``share_prompt_prefix``) against the plain concatenated transformers forward."""

from __future__ import annotations

import pytest
import torch

from rlloom import Batch
from rlloom_fsdp.prefix import distinct_prompts
from test_fsdp_engine import (  # the shared fixtures and plain-transformers references
    LR,
    adamw_first_step,
    assert_weights_close,
    engines,  # noqa: F401 - pytest fixture
    make_batch,
    model_dir,  # noqa: F401 - pytest fixture
    one_thread,  # noqa: F401 - pytest fixture
    pg_loss,
    reference_forward,
    reference_gradients,
    reference_model,
)


def grouped_batch(groups: int = 3, n: int = 3) -> Batch:
    """``groups`` prompts of different lengths, ``n`` ragged responses each (rows interleaved)."""
    batch = make_batch(rows=groups * n, seed=4)
    owner = torch.arange(groups * n) // n * n  # the first row of each group
    for name in ("prompts", "prompt_mask"):
        batch[name] = batch[name][owner]
    return batch


def count_forward_rows(engine) -> list[int]:
    """Record the number of rows of every base-transformer forward the engine makes."""
    rows: list[int] = []
    base = engine.model.base_model
    forward = base.forward

    def recording_forward(*args, **kwargs):
        rows.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    base.forward = recording_forward
    return rows


def test_distinct_prompts_maps_rows_to_their_prompt():
    batch = grouped_batch(groups=2, n=3)
    ids, mask, inverse = distinct_prompts(batch)
    assert ids.shape[0] == 2
    torch.testing.assert_close(ids[inverse], batch["prompts"])
    torch.testing.assert_close(mask[inverse], batch["prompt_mask"])


def test_shared_prefix_log_probs_match_plain_transformers(model_dir, engines):
    batch = grouped_batch()
    engine = engines(model_dir, micro_batch_size=9)
    rows = count_forward_rows(engine)
    out = engine.compute_log_probs(batch, entropy=True)
    assert rows == [3, 9]  # 3 distinct prompts once, then the 9 responses on their caches
    with torch.no_grad():
        expected_log_probs, expected_entropy = reference_forward(reference_model(model_dir), batch)
    torch.testing.assert_close(out["log_probs"], expected_log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out["entropy"], expected_entropy, atol=1e-5, rtol=0)


@pytest.mark.parametrize("micro_batch_size", [9, 4])  # 4: a group is split across micro-batches
def test_shared_prefix_train_step_equals_hand_written_adamw(micro_batch_size, model_dir, engines):
    batch = grouped_batch()
    engine = engines(model_dir, micro_batch_size=micro_batch_size)
    engine.train_step(batch, pg_loss)
    params, grads = reference_gradients(model_dir, batch)
    expected = {name: adamw_first_step(params[name], grads[name], LR) for name in params}
    assert_weights_close(dict(engine.named_weights()), expected, atol=1e-6)


def test_no_repeated_prompt_uses_the_plain_forward(model_dir, engines):
    engine = engines(model_dir, micro_batch_size=6)
    rows = count_forward_rows(engine)
    engine.compute_log_probs(make_batch())
    assert rows == [6]
