"""``rlloom_fsdp.head.chunked_log_probs`` against the plain computation (full logits, autograd)."""

from __future__ import annotations

import pytest
import torch
from rlloom_enginekit.sequences import token_entropy, token_log_probs
from rlloom_fsdp.head import Float32Products, TensorCoreProducts, chunked_log_probs, default_chunk_rows, head_products
from rlloom_trainer.testing import device_params
from torch.utils._python_dispatch import TorchDispatchMode


def inputs(rows=7, hidden=5, vocab=11, dtype=torch.float64, bias=False, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=g, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64)
    b = torch.randn(vocab, generator=g, dtype=torch.float64) if bias else None
    t = torch.randint(0, vocab, (rows,), generator=g)
    move = lambda x: None if x is None else x.to(device=device, dtype=dtype).requires_grad_()  # noqa: E731
    return move(h), move(w), move(b), t.to(device)


def plain(h, w, b, t, temperature):
    logits = torch.nn.functional.linear(h.double(), w.double(), None if b is None else b.double()) / temperature
    return token_log_probs(logits[None], t[None])[0].double(), token_entropy(logits[None])[0].double()


def consumer_loss(log_probs, entropy, advantages):
    """What a policy loss does with them: −Σ A·log π − 0.01 Σ H."""
    return -(log_probs * advantages).sum() - 0.01 * entropy.sum()


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 100])
@pytest.mark.parametrize("bias", [False, True])
def test_float64_values_and_gradients_equal_the_plain_computation(chunk_rows, bias):
    h, w, b, t = inputs(bias=bias)
    advantages = torch.randn(len(t), dtype=torch.float64)
    log_probs, entropy = chunked_log_probs(h, w, t, 0.7, entropy=True, chunk_rows=chunk_rows, bias=b)
    expected_lp, expected_ent = plain(h, w, b, t, 0.7)
    # The chunked function computes in float32 whatever the input dtype.
    torch.testing.assert_close(log_probs.double(), expected_lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy.double(), expected_ent, atol=1e-5, rtol=0)
    params = [p for p in (h, w, b) if p is not None]
    got = torch.autograd.grad(consumer_loss(log_probs.double(), entropy.double(), advantages), params)
    want = torch.autograd.grad(consumer_loss(expected_lp, expected_ent, advantages), params)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_gradients_pass_gradcheck_in_the_float32_computation():
    """Finite differences on float64 inputs (the function computes in float32, so a loose tolerance)."""
    h, w, _, t = inputs(rows=4, hidden=3, vocab=5)

    def both(hidden, weight):
        return chunked_log_probs(hidden, weight, t, 1.3, entropy=True, chunk_rows=3)

    assert torch.autograd.gradcheck(both, (h, w), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("which", ["log_probs", "entropy"])
def test_one_output_alone_gets_its_own_gradient(which):
    h, w, _, t = inputs()
    log_probs, entropy = chunked_log_probs(h, w, t, 1.0, entropy=True, chunk_rows=2)
    expected_lp, expected_ent = plain(h, w, None, t, 1.0)
    out, ref = (log_probs, expected_lp) if which == "log_probs" else (entropy, expected_ent)
    got = torch.autograd.grad(out.double().sum(), (h, w))
    want = torch.autograd.grad(ref.sum(), (h, w))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_without_entropy_and_with_no_rows():
    h, w, _, t = inputs()
    log_probs, entropy = chunked_log_probs(h.float(), w.float(), t, 1.0, entropy=False, chunk_rows=4)
    assert entropy is None and log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.double(), plain(h, w, None, t, 1.0)[0], atol=1e-5, rtol=0)
    empty_lp, empty_ent = chunked_log_probs(h[:0], w, t[:0], 1.0, entropy=True, chunk_rows=4)
    assert empty_lp.shape == empty_ent.shape == (0,)
    (grad_w,) = torch.autograd.grad(empty_lp.sum() + empty_ent.sum(), (w,), allow_unused=True)
    assert grad_w is None or torch.all(grad_w == 0)


def test_bfloat16_inputs_get_bfloat16_gradients_close_to_float32():
    h, w, _, t = inputs(dtype=torch.bfloat16)
    log_probs, entropy = chunked_log_probs(h, w, t, 1.0, entropy=True, chunk_rows=3)
    expected_lp, _ = plain(h.detach().double(), w.detach().double(), None, t, 1.0)
    torch.testing.assert_close(log_probs.double(), expected_lp, atol=1e-4, rtol=0)  # fp32 math on bf16 values
    grad_h, grad_w = torch.autograd.grad(log_probs.sum() + entropy.sum(), (h, w))
    assert grad_h.dtype == grad_w.dtype == torch.bfloat16


class LargestAllocation(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


def test_no_tensor_as_large_as_the_full_logits_exists():
    rows, vocab, hidden, chunk = 64, 1000, 8, 16
    h, w, _, t = inputs(rows=rows, hidden=hidden, vocab=vocab, dtype=torch.float32)
    with LargestAllocation() as forward:
        log_probs, entropy = chunked_log_probs(h, w, t, 1.0, entropy=True, chunk_rows=chunk)
    with LargestAllocation() as backward:
        (log_probs.sum() + entropy.sum()).backward()
    assert forward.largest == backward.largest == chunk * vocab  # one chunk of logits, never rows × vocab
    with LargestAllocation() as reference:
        plain(h.detach(), w.detach(), None, t, 1.0)
    assert reference.largest >= rows * vocab  # the check sees a full logits tensor when there is one


def test_default_chunk_rows_bounds_one_chunk_of_logits():
    assert default_chunk_rows(49152) == 341 and default_chunk_rows(151936) == 110
    assert default_chunk_rows(10**9) == 1


@pytest.mark.parametrize("device", device_params("bf16 chunked head on the GPU vs float64 CPU reference"))
def test_on_each_device_against_the_cpu_reference(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    h, w, _, t = inputs(rows=40, hidden=16, vocab=300, dtype=dtype, device=device)
    log_probs, entropy = chunked_log_probs(h, w, t, 0.9, entropy=True, chunk_rows=7)
    expected_lp, expected_ent = plain(h.detach().cpu().double(), w.detach().cpu().double(), None, t.cpu(), 0.9)
    torch.testing.assert_close(log_probs.cpu().double(), expected_lp, atol=1e-4, rtol=0)
    torch.testing.assert_close(entropy.cpu().double(), expected_ent, atol=1e-4, rtol=0)


def test_cpu_and_float32_inputs_take_the_float32_products():
    """Only 16-bit operands on a CUDA GPU are multiplied in their dtype (the CPU has no float32-output
    16-bit product); the float32 path's numbers are those the float32 tests above check."""
    for dtype in (torch.float32, torch.bfloat16):
        h, w, _, _ = inputs(dtype=dtype)
        assert isinstance(head_products(h, w, None), Float32Products)


@pytest.mark.cuda("bf16 LM head on tensor cores, chunked recompute, vs float32 logits of the bf16 values")
def test_cuda_bf16_head_through_the_chunked_recompute_matches_the_upcast_reference():
    """A 131,072-token vocabulary (``default_chunk_rows``: 128 rows per chunk) and 300 rows: three
    chunks, so backward recomputes each chunk's logits. Reference: the plain computation on the same
    bf16 values upcast (float64 products, float32 log-softmax), forward and gradients of a policy loss.
    Tolerances: forward 1e-4 absolute (16-bit products are exact in float32; only the float32 sums of
    256 terms round, |log p| ~ 12); gradients within 1 % in relative L2 norm (dL/dz enters backward's
    products rounded to bf16, 2^-9 relative, and the gradients come back in bf16)."""
    vocab, rows, hidden = 131072, 300, 256
    chunk = default_chunk_rows(vocab)
    assert chunk == 128 and rows > 2 * chunk
    generator = torch.Generator(device="cuda").manual_seed(0)
    h, w = ((torch.randn(size, device="cuda", generator=generator) / 4).bfloat16().requires_grad_()
            for size in ((rows, hidden), (vocab, hidden)))
    t = torch.randint(0, vocab, (rows,), device="cuda", generator=generator)
    advantages = torch.randn(rows, device="cuda", generator=generator, dtype=torch.float64)
    assert isinstance(head_products(h, w, None), TensorCoreProducts)
    log_probs, entropy = chunked_log_probs(h, w, t, 0.9, entropy=True, chunk_rows=chunk)
    h64, w64 = (x.detach().double().requires_grad_() for x in (h, w))
    expected_lp, expected_ent = plain(h64, w64, None, t, 0.9)
    torch.testing.assert_close(log_probs.double(), expected_lp, atol=1e-4, rtol=0)
    torch.testing.assert_close(entropy.double(), expected_ent, atol=1e-4, rtol=0)
    got = torch.autograd.grad(consumer_loss(log_probs.double(), entropy.double(), advantages), (h, w))
    want = torch.autograd.grad(consumer_loss(expected_lp, expected_ent, advantages), (h64, w64))
    for grad, expected in zip(got, want):
        assert grad.dtype == torch.bfloat16
        assert float((grad.double() - expected).norm() / expected.norm()) < 1e-2


class MatmulCount(TorchDispatchMode):
    """Counts the matrix products (mm, addmm, addmm_) the ops under it run."""

    PRODUCTS = {"mm", "addmm", "addmm_"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func._overloadpacket.__name__ in self.PRODUCTS
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("chunk_rows, backward_products", [(64, 2), (16, 3 * 4)])
def test_one_chunk_keeps_its_logits_and_several_chunks_recompute_them(chunk_rows, backward_products):
    """Backward's products per chunk: dL/dh and dL/dW, plus the logits again when there are several
    chunks; one chunk's logits are kept from forward. Both give the same gradients."""
    grads = []
    for rows_per_chunk, expected in ((chunk_rows, backward_products), (10**6, 2)):
        h, w, _, t = inputs(rows=64, hidden=8, vocab=300, dtype=torch.float32)
        log_probs, entropy = chunked_log_probs(h, w, t, 1.0, entropy=True, chunk_rows=rows_per_chunk)
        with MatmulCount() as products:
            (log_probs.sum() + 0.1 * entropy.sum()).backward()
        assert products.count == expected
        grads.append((h.grad, w.grad))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
