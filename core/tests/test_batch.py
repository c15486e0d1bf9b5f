"""Batch: every operation against expectations written out by hand."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from rlloom.batch import Batch, BatchError


def make_batch() -> Batch:
    """Three rows: a [3, 2] int64 tensor, a [3] float32 tensor, two object fields, meta."""
    return Batch(
        {
            "ids": torch.tensor([[1, 2], [3, 4], [5, 6]]),
            "score": torch.tensor([0.5, -1.0, 2.0]),
        },
        {"text": ["a", "b", "c"], "extra": [{"k": 1}, None, {"k": 3}]},
        {"step": 7, "temperature": 0.9},
    )


def objects_list(batch: Batch, name: str) -> list:
    return list(batch[name])


# ------------------------------------------------------------------------------ construction / access
def test_construction_holds_tensors_objects_and_meta():
    batch = make_batch()
    assert len(batch) == 3 and batch.batch_size == 3
    assert sorted(batch.keys()) == ["extra", "ids", "score", "text"]
    assert torch.equal(batch["ids"], torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert batch["ids"].dtype == torch.int64 and batch["score"].dtype == torch.float32
    assert isinstance(batch["text"], np.ndarray) and batch["text"].dtype == object
    assert objects_list(batch, "text") == ["a", "b", "c"]
    assert objects_list(batch, "extra") == [{"k": 1}, None, {"k": 3}]
    assert batch.meta == {"step": 7, "temperature": 0.9}
    assert "ids" in batch and "text" in batch and "nope" not in batch and 5 not in batch
    assert batch.get("nope", "default") == "default"
    assert list(batch.tensors.keys()) == ["ids", "score"] and list(batch.objects) == ["text", "extra"]


def test_objects_keep_lists_dicts_and_none_as_single_values():
    batch = Batch(objects={"v": [[1, 2], [3], None], "d": [{"a": [1]}, {}, {"b": None}]})
    assert len(batch) == 3
    assert batch["v"][0] == [1, 2] and batch["v"][1] == [3] and batch["v"][2] is None
    assert batch["d"][0] == {"a": [1]} and batch["d"][1] == {} and batch["d"][2] == {"b": None}


def test_a_string_is_not_split_into_characters():
    with pytest.raises(BatchError, match="'text'.*sequence.*str"):
        Batch(objects={"text": "abc"})
    batch = make_batch()
    with pytest.raises(BatchError, match="'note'.*str"):
        batch["note"] = "xyz"


def test_empty_batch_needs_explicit_size():
    with pytest.raises(BatchError, match="batch_size"):
        Batch()
    assert len(Batch(batch_size=4)) == 4


def test_mismatched_sizes_name_the_fields():
    with pytest.raises(BatchError) as info:
        Batch({"a": torch.zeros(2), "b": torch.zeros(3, 4)}, {"c": [1, 2, 3]})
    message = str(info.value)
    assert "'b': 3" in message and "'c': 3" in message and "'a'" not in message
    with pytest.raises(BatchError, match=r"'a': 2"):
        Batch({"a": torch.zeros(2)}, batch_size=5)


def test_scalar_tensor_and_field_in_both_places_are_rejected():
    with pytest.raises(BatchError, match="'s'.*scalar"):
        Batch({"s": torch.tensor(1.0)})
    with pytest.raises(BatchError, match=r"\['x'\].*both"):
        Batch({"x": torch.zeros(2)}, {"x": [1, 2]})


def test_missing_field_names_it_and_lists_present_ones():
    batch = make_batch()
    with pytest.raises(KeyError) as info:
        batch["responses"]
    assert "'responses'" in str(info.value)
    assert "['extra', 'ids', 'score', 'text']" in str(info.value)
    with pytest.raises(BatchError) as info:
        batch.require("ids", "responses", "uid")
    assert "['responses', 'uid']" in str(info.value) and "['extra', 'ids', 'score', 'text']" in str(info.value)
    batch.require("ids", "text")  # present: no error


# ------------------------------------------------------------------------------ __setitem__
def test_setitem_checks_sizes_and_switches_kinds():
    batch = make_batch()
    batch["mask"] = torch.tensor([[1, 0], [1, 1], [0, 0]])
    assert torch.equal(batch["mask"], torch.tensor([[1, 0], [1, 1], [0, 0]]))
    batch["uid"] = ["u0", "u0", "u1"]
    assert objects_list(batch, "uid") == ["u0", "u0", "u1"]
    with pytest.raises(BatchError, match=r"'bad'.*\(2,\).*3"):
        batch["bad"] = torch.zeros(2, 5)
    with pytest.raises(BatchError, match=r"'bad'.*\(\).*3"):
        batch["bad"] = torch.tensor(1.0)
    with pytest.raises(BatchError, match="'bad' has 4 values, batch size is 3"):
        batch["bad"] = [1, 2, 3, 4]
    assert "bad" not in batch
    # a name moves between tensors and objects instead of living in both
    batch["text"] = torch.tensor([9, 8, 7])
    assert "text" in batch.tensors.keys() and "text" not in batch.objects
    batch["ids"] = [None, None, None]
    assert "ids" in batch.objects and "ids" not in batch.tensors.keys()


# ------------------------------------------------------------------------------ select / exclude / union
def test_select_and_exclude():
    batch = make_batch()
    selected = batch.select("score", "text")
    assert sorted(selected.keys()) == ["score", "text"]
    assert torch.equal(selected["score"], torch.tensor([0.5, -1.0, 2.0]))
    assert selected.meta == {"step": 7, "temperature": 0.9}
    assert selected["score"].data_ptr() == batch["score"].data_ptr()  # no copy
    with pytest.raises(BatchError, match=r"\['nope'\]"):
        batch.select("ids", "nope")
    excluded = batch.exclude("ids", "extra", "not_there")
    assert sorted(excluded.keys()) == ["score", "text"] and len(excluded) == 3


def test_union_merges_fields_and_meta():
    left = Batch({"a": torch.tensor([1, 2])}, {"s": ["x", "y"]}, {"step": 1, "left": True})
    right = Batch({"a": torch.tensor([1, 2]), "b": torch.tensor([3.0, 4.0])}, {"s": ["x", "y"], "t": [{}, None]},
                  {"step": 2})
    merged = left.union(right)
    assert sorted(merged.keys()) == ["a", "b", "s", "t"]
    assert torch.equal(merged["b"], torch.tensor([3.0, 4.0]))
    assert objects_list(merged, "t") == [{}, None]
    assert merged.meta == {"step": 2, "left": True}


def test_union_rejects_differing_fields_and_sizes():
    left = Batch({"a": torch.tensor([1, 2])}, {"s": ["x", "y"]})
    with pytest.raises(BatchError, match="'a' differs"):
        left.union(Batch({"a": torch.tensor([1, 3])}))
    with pytest.raises(BatchError, match="'a' differs"):
        left.union(Batch({"a": torch.tensor([1.0, 2.0])}))  # same values, other dtype
    with pytest.raises(BatchError, match="'s' differs"):
        left.union(Batch(objects={"s": ["x", "z"]}))
    with pytest.raises(BatchError, match="sizes 2 and 3"):
        left.union(Batch({"b": torch.zeros(3)}))


# ------------------------------------------------------------------------------ reorder
def test_reorder_permutation_subset_repeats_and_negative():
    batch = make_batch()
    permuted = batch.reorder([2, 0, 1])
    assert torch.equal(permuted["ids"], torch.tensor([[5, 6], [1, 2], [3, 4]]))
    assert torch.equal(permuted["score"], torch.tensor([2.0, 0.5, -1.0]))
    assert objects_list(permuted, "text") == ["c", "a", "b"]
    assert objects_list(permuted, "extra") == [{"k": 3}, {"k": 1}, None]
    assert permuted.meta == {"step": 7, "temperature": 0.9}
    subset = batch.reorder(torch.tensor([1]))
    assert len(subset) == 1 and torch.equal(subset["ids"], torch.tensor([[3, 4]]))
    repeated = batch.reorder([0, 0, 2, 0])
    assert objects_list(repeated, "text") == ["a", "a", "c", "a"]
    assert torch.equal(repeated["ids"], torch.tensor([[1, 2], [1, 2], [5, 6], [1, 2]]))
    assert objects_list(batch.reorder([-1, -3]), "text") == ["c", "a"]
    assert len(batch.reorder([])) == 0


def test_reorder_rejects_bad_indices():
    batch = make_batch()
    with pytest.raises(BatchError, match=r"\[3\] out of range for batch size 3"):
        batch.reorder([0, 3])
    with pytest.raises(BatchError, match=r"\[-4\] out of range"):
        batch.reorder([-4])
    with pytest.raises(BatchError, match="integer indices.*bool"):
        batch.reorder(torch.tensor([True, False, True]))
    with pytest.raises(BatchError, match="integer indices.*float"):
        batch.reorder([0.0, 1.0])
    with pytest.raises(BatchError, match=r"1-D.*\(1, 2\)"):
        batch.reorder([[0, 1]])


# ------------------------------------------------------------------------------ slice / split / chunk
def test_slice_is_a_view_with_python_bounds():
    batch = make_batch()
    middle = batch.slice(1, 3)
    assert torch.equal(middle["ids"], torch.tensor([[3, 4], [5, 6]]))
    assert objects_list(middle, "text") == ["b", "c"]
    assert middle["ids"].data_ptr() == batch["ids"][1].data_ptr()
    assert objects_list(batch.slice(-1, 10), "text") == ["c"]
    assert len(batch.slice(2, 1)) == 0


def test_split_last_piece_smaller():
    batch = Batch({"x": torch.arange(5)}, {"s": list("abcde")})
    pieces = batch.split(2)
    assert [p["x"].tolist() for p in pieces] == [[0, 1], [2, 3], [4]]
    assert [objects_list(p, "s") for p in pieces] == [["a", "b"], ["c", "d"], ["e"]]
    assert [p["x"].tolist() for p in batch.split(5)] == [[0, 1, 2, 3, 4]]
    with pytest.raises(BatchError, match="split size must be >= 1, got 0"):
        batch.split(0)


def test_chunk_sizes_differ_by_at_most_one():
    batch = Batch({"x": torch.arange(7)})
    assert [p["x"].tolist() for p in batch.chunk(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [p["x"].tolist() for p in batch.chunk(7)] == [[i] for i in range(7)]
    assert [p["x"].tolist() for p in batch.chunk(1)] == [list(range(7))]
    with pytest.raises(BatchError, match="7 rows into 8"):
        batch.chunk(8)
    with pytest.raises(BatchError, match="parts >= 1"):
        batch.chunk(0)


# ------------------------------------------------------------------------------ concat
def test_concat_keeps_order_and_first_meta():
    first = Batch({"x": torch.tensor([[1, 1]])}, {"s": ["a"]}, {"step": 1})
    second = Batch({"x": torch.tensor([[2, 2], [3, 3]])}, {"s": ["b", None]}, {"step": 2})
    joined = Batch.concat([first, second, first])
    assert torch.equal(joined["x"], torch.tensor([[1, 1], [2, 2], [3, 3], [1, 1]]))
    assert objects_list(joined, "s") == ["a", "b", None, "a"]
    assert joined.meta == {"step": 1}


def test_concat_rejects_mismatched_fields_shapes_dtypes():
    base = Batch({"x": torch.zeros(2, 3)}, {"s": ["a", "b"]})
    with pytest.raises(BatchError, match=r"batch 1 has tensor fields \['x', 'y'\], batch 0 has \['x'\]"):
        Batch.concat([base, Batch({"x": torch.zeros(1, 3), "y": torch.zeros(1)}, {"s": ["c"]})])
    with pytest.raises(BatchError, match=r"batch 1 has object fields \[\], batch 0 has \['s'\]"):
        Batch.concat([base, Batch({"x": torch.zeros(1, 3)})])
    with pytest.raises(BatchError, match=r"tensor fields \['s', 'x'\]"):  # 's' a tensor in one, object in other
        Batch.concat([base, Batch({"x": torch.zeros(1, 3), "s": torch.zeros(1)})])
    with pytest.raises(BatchError, match=r"'x' has different trailing shapes \[\(3,\), \(4,\)\]"):
        Batch.concat([base, Batch({"x": torch.zeros(1, 4)}, {"s": ["c"]})])
    with pytest.raises(BatchError, match="'x' has different dtypes"):
        Batch.concat([base, Batch({"x": torch.zeros(1, 3, dtype=torch.int64)}, {"s": ["c"]})])
    with pytest.raises(BatchError, match="at least one"):
        Batch.concat([])


# ------------------------------------------------------------------------------ repeat / to / pickle
def test_repeat_interleaved_and_tiled():
    batch = Batch({"x": torch.tensor([[0, 1], [2, 3], [4, 5]])}, {"s": ["a", "b", "c"]}, {"n": 2})
    inter = batch.repeat(2)
    assert torch.equal(inter["x"], torch.tensor([[0, 1], [0, 1], [2, 3], [2, 3], [4, 5], [4, 5]]))
    assert objects_list(inter, "s") == ["a", "a", "b", "b", "c", "c"]
    tiled = batch.repeat(2, interleave=False)
    assert torch.equal(tiled["x"], torch.tensor([[0, 1], [2, 3], [4, 5], [0, 1], [2, 3], [4, 5]]))
    assert objects_list(tiled, "s") == ["a", "b", "c", "a", "b", "c"]
    assert inter.meta == {"n": 2}
    assert torch.equal(batch.repeat(1)["x"], batch["x"])
    with pytest.raises(BatchError, match="n >= 1, got 0"):
        batch.repeat(0)


def test_to_cpu_keeps_everything():
    batch = make_batch()
    moved = batch.to("cpu")
    assert moved["ids"].device.type == "cpu"
    assert torch.equal(moved["ids"], torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert objects_list(moved, "extra") == [{"k": 1}, None, {"k": 3}]
    assert moved.meta == {"step": 7, "temperature": 0.9}


def _roundtrip_modules():
    modules = [pickle]
    try:
        import cloudpickle
    except ImportError:
        return modules
    return modules + [cloudpickle]


@pytest.mark.parametrize("module", _roundtrip_modules(), ids=lambda m: m.__name__)
def test_pickle_round_trip(module):
    batch = Batch(
        {
            "ids": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
            "lp": torch.tensor([[-0.25, -1.5], [0.0, -3.0]], dtype=torch.float64),
            "mask": torch.tensor([[True, False], [True, True]]),
        },
        {"extra": [{"answer": [1, 2]}, None], "text": ["x", "y"]},
        {"step": 3, "sampling": {"temperature": 0.5}},
    )
    restored = module.loads(module.dumps(batch))
    assert len(restored) == 2 and sorted(restored.keys()) == ["extra", "ids", "lp", "mask", "text"]
    assert restored["ids"].dtype == torch.int32 and restored["lp"].dtype == torch.float64
    assert restored["mask"].dtype == torch.bool
    assert torch.equal(restored["ids"], torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
    assert torch.equal(restored["lp"], torch.tensor([[-0.25, -1.5], [0.0, -3.0]], dtype=torch.float64))
    assert torch.equal(restored["mask"], torch.tensor([[True, False], [True, True]]))
    assert objects_list(restored, "extra") == [{"answer": [1, 2]}, None]
    assert objects_list(restored, "text") == ["x", "y"]
    assert restored.meta == {"step": 3, "sampling": {"temperature": 0.5}}
    restored["new"] = torch.zeros(2)  # still a working batch
    assert "new" in restored


def test_concat_pads_prompts_left_and_responses_right():
    first = Batch(
        {"prompts": torch.tensor([[5, 6]]), "prompt_mask": torch.tensor([[1, 1]]),
         "responses": torch.tensor([[7]]), "response_mask": torch.tensor([[1]]), "scores": torch.tensor([0.5])},
        {"uid": ["x"]},
    )
    second = Batch(
        {"prompts": torch.tensor([[1, 2, 3]]), "prompt_mask": torch.tensor([[0, 1, 1]]),
         "responses": torch.tensor([[8, 9, 4]]), "response_mask": torch.tensor([[1, 1, 0]]),
         "scores": torch.tensor([1.0])},
        {"uid": ["y"]},
    )
    out = Batch.concat_padded([first, second], pad_values={"prompts": 2, "responses": 3})
    assert out["prompts"].tolist() == [[2, 5, 6], [1, 2, 3]]  # left, with the pad value given
    assert out["prompt_mask"].tolist() == [[0, 1, 1], [0, 1, 1]]
    assert out["responses"].tolist() == [[7, 3, 3], [8, 9, 4]]
    assert out["response_mask"].tolist() == [[1, 0, 0], [1, 1, 0]]  # masks pad with 0
    assert out["scores"].tolist() == [0.5, 1.0] and list(out["uid"]) == ["x", "y"]
