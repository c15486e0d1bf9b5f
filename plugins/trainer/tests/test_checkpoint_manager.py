"""CheckpointManager: atomic saves, completeness and checksum checks, retention, disk-full and kill points."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rlloom_trainer.checkpoint import (
    KILL_ENV, CheckpointError, CheckpointManager, damage, is_complete, read_step, verified_step, write_atomic,
)
from rlloom_trainer.testing import default_sigint, mounted_tmpfs, python_sigint


def write_files(sizes: dict[str, int]):
    def write(folder: str) -> None:
        for rel, size in sizes.items():
            os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
            with open(os.path.join(folder, rel), "wb") as handle:
                handle.write(b"x" * size)

    return write


def test_save_writes_a_manifest_of_every_file_and_the_latest_pointer(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    checkpoint = manager.save(3, write_files({"actor/weights.bin": 100, "trainer_state.pt": 7}))
    assert checkpoint.path == str(tmp_path / "checkpoints" / "global_step_3") and checkpoint.step == 3
    manifest = json.loads((tmp_path / "checkpoints" / "global_step_3" / "manifest.json").read_text())
    assert manifest == {"step": 3, "files": {
        "actor/weights.bin": {"bytes": 100, "sha256": hashlib.sha256(b"x" * 100).hexdigest()},
        "trainer_state.pt": {"bytes": 7, "sha256": hashlib.sha256(b"x" * 7).hexdigest()}}}
    assert (tmp_path / "checkpoints" / "latest").read_text() == "global_step_3\n"
    assert is_complete(checkpoint.path) and read_step(checkpoint.path) == 3 == verified_step(checkpoint.path)
    assert damage(checkpoint.path) is None
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["global_step_3", "latest"]


def test_truncated_or_unfinished_checkpoints_are_not_complete(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    manager.save(2, write_files({"a.bin": 10}))
    newer = manager.save(4, write_files({"a.bin": 10}))
    with open(os.path.join(newer.path, "a.bin"), "wb") as handle:  # torn file
        handle.write(b"x" * 3)
    os.makedirs(tmp_path / "checkpoints" / "global_step_6.tmp")  # an interrupted save
    os.makedirs(tmp_path / "checkpoints" / "global_step_8")  # a folder without manifest
    assert not is_complete(newer.path)
    assert manager.latest().step == 2
    with pytest.raises(CheckpointError, match="global_step_4' is not a complete checkpoint"):
        read_step(newer.path)
    manager.save(5, write_files({"b.bin": 1}))
    assert "global_step_6.tmp" not in os.listdir(tmp_path / "checkpoints")
    assert manager.latest().step == 5



def flip_8_bytes(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        data = handle.read(8)
        handle.seek(offset)
        handle.write(bytes(byte ^ 0xFF for byte in data))


DAMAGES = {  # what is done to global_step_4's "actor/shard.bin" (64 bytes) -> what damage() says
    "8 bytes flipped": (lambda path: flip_8_bytes(path, 28), "actor/shard.bin does not match its sha256 checksum"),
    "truncated": (lambda path: os.truncate(path, 32), "actor/shard.bin has 32 bytes where its manifest says 64"),
    "deleted": (os.remove, "actor/shard.bin is missing"),
    "manifest deleted": (lambda path: os.remove(os.path.join(os.path.dirname(os.path.dirname(path)), "manifest.json")),
                         "its manifest.json is missing or unreadable"),
}


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_resume_skips_a_damaged_checkpoint_naming_the_file_and_moves_it_aside(tmp_path, capsys, kind):
    manager = CheckpointManager(str(tmp_path))
    manager.save(2, write_files({"actor/shard.bin": 64}))
    newest = manager.save(4, write_files({"actor/shard.bin": 64, "trainer_state.pt": 5}))
    spoil, said = DAMAGES[kind]
    spoil(os.path.join(newest.path, "actor", "shard.bin"))
    assert said in damage(newest.path)
    with pytest.raises(CheckpointError, match=f"the checkpoint '{newest.path}' is damaged: {said}"):
        verified_step(newest.path)
    assert manager.newest_intact().step == 2
    assert capsys.readouterr().err.startswith(f"rlloom: skipping the damaged checkpoint {newest.path}: {said}")
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["global_step_2", "global_step_4.damaged", "latest"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "global_step_2\n"
    assert manager.newest_intact().step == 2 and capsys.readouterr().err == ""  # said once: it is out of the way


def test_a_checkpoint_written_before_checksums_is_checked_by_size_and_said_once(tmp_path, capsys):
    manager = CheckpointManager(str(tmp_path))
    checkpoint = manager.save(2, write_files({"a.bin": 10}))
    (Path(checkpoint.path) / "manifest.json").write_text(json.dumps({"step": 2, "files": {"a.bin": 10}}))
    assert damage(checkpoint.path) is None and verified_step(checkpoint.path) == 2
    assert manager.newest_intact() == checkpoint
    assert capsys.readouterr().err.count("written before checkpoints carried checksums") == 1
    os.truncate(os.path.join(checkpoint.path, "a.bin"), 3)
    assert damage(checkpoint.path) == "a.bin has 3 bytes where its manifest says 10 (truncated or rewritten)"


def test_keep_last_n_keeps_the_newest_complete_checkpoints(tmp_path):
    manager = CheckpointManager(str(tmp_path), keep_last_n=2)
    for step in (1, 2, 3, 4):
        manager.save(step, write_files({"a": step}))
    assert [c.step for c in manager.complete()] == [3, 4]
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["global_step_3", "global_step_4", "latest"]


@pytest.mark.parametrize("keep", [0, 1, 2])
def test_checkpoints_are_ordered_by_step_number_past_nine(tmp_path, keep):
    """Steps 9, 10, 11: by number, not by name ("global_step_10" sorts before "global_step_9" as text)."""
    manager = CheckpointManager(str(tmp_path), keep_last_n=keep)
    for step in (9, 10, 11):
        manager.save(step, write_files({"a": step}))
        assert manager.latest().step == step
    kept = {0: [9, 10, 11], 1: [11], 2: [10, 11]}[keep]
    assert [c.step for c in manager.complete()] == kept
    assert sorted(os.listdir(tmp_path / "checkpoints")) == sorted([f"global_step_{s}" for s in kept] + ["latest"])
    assert manager.newest_intact().step == 11


def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path):
    manager = CheckpointManager(str(tmp_path))
    previous = manager.save(2, write_files({"a.bin": 10}))

    def fills_the_disk(folder: str) -> None:
        write_files({"actor/part.bin": 5})(folder)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError) as caught:
        manager.save(4, fills_the_disk)
    message = str(caught.value)
    assert "global_step_4" in message and "the disk is full" in message
    assert f"the previous checkpoint {previous.path!r} is intact" in message
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["global_step_2", "latest"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "global_step_2\n"
    assert manager.latest() == previous and is_complete(previous.path)


def test_write_atomic_replaces_the_whole_file(tmp_path):
    path = str(tmp_path / "f")
    write_atomic(path, b"old")
    write_atomic(path, b"new content")
    assert (tmp_path / "f").read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["f"]


SAVE_TWICE = textwrap.dedent("""
    import sys
    from rlloom_trainer.checkpoint import CheckpointManager

    def write(folder):
        open(folder + "/a.bin", "wb").write(b"x" * 10)

    manager = CheckpointManager(sys.argv[1])
    manager.save(2, write)
    manager.save(4, write)
""")


@pytest.mark.parametrize(("point", "listing", "latest_step"), [
    ("during_save", ["global_step_2", "global_step_4.tmp", "latest"], 2),
    ("before_latest", ["global_step_2", "global_step_4", "latest"], 4),
])
def test_sigkill_inside_a_save_never_leaves_a_complete_looking_partial(tmp_path, point, listing, latest_step):
    env = {**os.environ, KILL_ENV: f"{point}:4"}
    result = subprocess.run([sys.executable, "-c", SAVE_TWICE, str(tmp_path)], env=env, timeout=60)
    assert result.returncode == -9
    assert sorted(os.listdir(tmp_path / "checkpoints")) == listing
    assert (tmp_path / "checkpoints" / "latest").read_text() == "global_step_2\n"
    assert CheckpointManager(str(tmp_path)).latest().step == latest_step


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB disk mounted for the test."""
    with mounted_tmpfs(tmp_path / "small", "1m") as folder:
        yield Path(folder)


def dcp_save(folder: str) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    dcp.save({"weights": torch.zeros(1_000_000)}, checkpoint_id=os.path.join(folder, "actor"))


def safetensors_save(folder: str) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"weights": torch.zeros(1_000_000)}, os.path.join(folder, "model.safetensors"))


@pytest.mark.parametrize("write", [dcp_save, safetensors_save], ids=["dcp", "safetensors"])
def test_a_library_filling_a_real_disk_is_a_checkpoint_error_and_leaves_nothing(small_tmpfs, write):
    # DCP raises CheckpointException (a BaseException) and safetensors SafetensorError, neither an OSError.
    manager = CheckpointManager(str(small_tmpfs))
    previous = manager.save(1, write_files({"a.bin": 10}))
    with pytest.raises(CheckpointError) as caught:
        manager.save(2, write)
    message = str(caught.value)
    assert "global_step_2" in message and "the disk is full" in message, message
    assert f"the previous checkpoint {previous.path!r} is intact" in message
    assert sorted(os.listdir(small_tmpfs / "checkpoints")) == ["global_step_1", "latest"]
    assert manager.latest() == previous and is_complete(previous.path)


class InterruptedWhilePickled:
    """An object whose serialisation is interrupted: Ctrl-C arriving while a library writes it."""

    def __reduce__(self):
        raise KeyboardInterrupt


def test_ctrl_c_inside_a_library_save_is_an_interrupt_not_a_failed_save(tmp_path):
    """DCP catches the KeyboardInterrupt of a Ctrl-C inside its save and raises its own
    CheckpointException: the manager raises KeyboardInterrupt again (the command then reports an
    interrupt, exit 130), and the earlier checkpoint stays the latest."""
    import torch
    import torch.distributed.checkpoint as dcp

    manager = CheckpointManager(str(tmp_path))
    manager.save(2, lambda folder: dcp_save(folder))

    def interrupted(folder: str) -> None:
        dcp.save({"weights": torch.zeros(4), "extra": InterruptedWhilePickled()},
                 checkpoint_id=os.path.join(folder, "actor"))

    with pytest.raises(KeyboardInterrupt) as info:
        manager.save(4, interrupted)
    assert type(info.value.__cause__).__name__ == "CheckpointException"  # what DCP raised
    assert manager.latest().step == 2


def test_a_sigint_a_library_turned_into_its_own_error_is_still_an_interrupt(tmp_path):
    """A real SIGINT inside a save whose library catches the KeyboardInterrupt and fails with another
    error (as torch's zip writer does when a write is interrupted: "unexpected pos"): inside the run's
    recording_interrupts block the manager raises KeyboardInterrupt; afterwards the same error is a
    failed save again, and the SIGINT and SIGTERM handlers from before the block are back."""
    from rlloom_trainer.sigint import received, recording_interrupts

    def loses_the_interrupt(folder: str) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            fails(folder)

    def fails(folder: str) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    manager = CheckpointManager(str(tmp_path))
    with python_sigint():  # what SIGINT does in this process, whatever it inherited
        before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)  # another test may have changed them
        with recording_interrupts():
            with pytest.raises(KeyboardInterrupt):
                manager.save(2, loses_the_interrupt)
            assert received()
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before and not received()
        with recording_interrupts():  # no interrupt in this block
            assert not received()
            with pytest.raises(CheckpointError, match="unexpected pos"):
                manager.save(2, fails)
        assert manager.latest() is None


SECOND_SIGNAL = textwrap.dedent("""
    import signal, sys, time
    from rlloom_trainer.sigint import received_signal, recording_interrupts, retake_signals

    with recording_interrupts():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        retake_signals()
        try:
            print("running", flush=True)
            time.sleep(60)
        except KeyboardInterrupt:
            print("closing after", received_signal(), flush=True)
            time.sleep(60)  # a slow close: the second signal must not wait for it
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_the_first_signal_interrupts_and_a_second_exits_at_once(signum):
    """Also when a library replaced the handlers inside the block (``retake_signals``)."""
    process = subprocess.Popen([sys.executable, "-c", SECOND_SIGNAL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=default_sigint)
    assert process.stdout.readline() == "running\n"
    process.send_signal(signum)
    assert process.stdout.readline() == f"closing after {int(signum)}\n"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signum
    assert stderr == f"rlloom: {signum.name} again: exiting now\n"
