"""The model cache: where it lives, build-once semantics, failed builds, concurrent builders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlloom_models.cache import VERSION_FILE, cache_root, cached_folder


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLLOOM_CACHE", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "rlloom"
    monkeypatch.setenv("RLLOOM_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(str(tmp_path / "arg")) == tmp_path / "arg"


def test_builds_once_then_reuses(tmp_path):
    calls = []

    def build(folder: Path) -> None:
        calls.append(folder)
        (folder / "config.json").write_text("{}")

    first = cached_folder("m", build, str(tmp_path))
    second = cached_folder("m", build, str(tmp_path))
    assert first == second == str(tmp_path / "models" / "m")
    assert len(calls) == 1
    assert calls[0] != Path(first)  # built elsewhere, then renamed into place
    assert (Path(first) / "config.json").read_text() == "{}"


def test_failed_build_publishes_nothing_and_is_retried(tmp_path):
    def broken(folder: Path) -> None:
        (folder / "half.bin").write_text("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        cached_folder("m", broken, str(tmp_path))
    models = tmp_path / "models"
    assert not (models / "m").exists()
    assert [p.name for p in models.iterdir() if p.is_dir()] == []  # the temporary folder is gone too

    path = cached_folder("m", lambda folder: (folder / "ok").write_text("1"), str(tmp_path))
    assert os.listdir(path) == ["ok"]


def test_leftover_temporary_folder_is_never_taken_and_is_removed(tmp_path):
    models = tmp_path / "models"
    leftover = models / ".m.abc123"  # what a builder killed mid-write leaves
    leftover.mkdir(parents=True)
    (leftover / "half.bin").write_text("partial")
    path = cached_folder("m", lambda folder: (folder / "ok").write_text("1"), str(tmp_path))
    assert os.listdir(path) == ["ok"]
    assert not leftover.exists()


@pytest.mark.parametrize("name", ["", ".hidden", "a/b"])
def test_rejects_bad_names(tmp_path, name):
    with pytest.raises(ValueError, match="cache folder name"):
        cached_folder(name, lambda folder: None, str(tmp_path))


BUILDER = """
import sys, time
from pathlib import Path
from rlloom_models.cache import cached_folder

cache, log = sys.argv[1], sys.argv[2]

def build(folder):
    with open(log, "a") as f:
        f.write("built\\n")
    for i in range(5):  # a slow, multi-file write that a concurrent reader must never see half-done
        (folder / f"part{i}").write_text(str(i))
        time.sleep(0.1)

print(cached_folder("shared", build, cache))
"""


def test_concurrent_processes_build_once(tmp_path):
    log = tmp_path / "builds.log"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, str(tmp_path / "cache"), str(log)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], [err for _, err in outputs]
    paths = {out.strip() for out, _ in outputs}
    assert paths == {str(tmp_path / "cache" / "models" / "shared")}
    assert log.read_text() == "built\n"
    folder = Path(paths.pop())
    assert sorted(os.listdir(folder)) == [f"part{i}" for i in range(5)]
    assert [(folder / f"part{i}").read_text() for i in range(5)] == [str(i) for i in range(5)]


def test_a_folder_of_another_version_is_rebuilt(tmp_path):
    built = []

    def build(folder: Path) -> None:
        built.append(folder)
        (folder / "weights").write_text(f"build {len(built)}")

    unversioned = Path(cached_folder("m", build, str(tmp_path)))  # what code before versions wrote
    assert not (unversioned / VERSION_FILE).exists()
    v2 = Path(cached_folder("m", build, str(tmp_path), version=2))  # no stamp: rebuilt in place
    assert v2 == unversioned and (v2 / "weights").read_text() == "build 2"
    assert (v2 / VERSION_FILE).read_text() == "2"
    assert cached_folder("m", build, str(tmp_path), version=2) == str(v2) and len(built) == 2  # reused
    cached_folder("m", build, str(tmp_path), version=3)
    assert (v2 / "weights").read_text() == "build 3" and len(built) == 3
    assert [p.name for p in (tmp_path / "models").iterdir() if p.is_dir()] == ["m"]  # nothing left behind
