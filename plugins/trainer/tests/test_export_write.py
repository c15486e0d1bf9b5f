"""``save_hf_folder`` on a disk that fills up while it writes: one error naming the folder, no
``<out>.tmp`` left behind, a previous folder kept as it was. The full disk is real: the write runs in a
child process whose file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored) makes the weights' write fail
with EFBIG, as ENOSPC does."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, resource, signal, sys
import torch
from rlloom.errors import RunFailedError
from rlloom_trainer.export import save_hf_folder

base, out = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    save_hf_folder([("w", torch.zeros(2**20))], base, out)  # 4 MiB of weights over a 1 MiB limit
except RunFailedError as error:
    print(error)
    sys.exit(7)
"""


def test_a_full_disk_leaves_no_temporary_folder_and_the_old_model(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    out = tmp_path / "final_model"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"the previous model")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(base), str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 7, done.stderr
    assert done.stdout.startswith(f"could not write the Hugging Face folder {out} ("), done.stdout
    assert "nothing was left half-written" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "final_model"]
    assert (out / "model.safetensors").read_bytes() == b"the previous model"


def test_the_written_weights_have_the_permissions_of_every_other_file(tmp_path):
    """safetensors' own writer makes 0600 files; an exported folder's files all get 0666 less the umask."""
    import os
    import stat

    import torch
    from rlloom_trainer.export import save_hf_folder

    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    out = save_hf_folder([("w", torch.zeros(4))], str(base), str(tmp_path / "final_model"))
    umask = os.umask(0o027)
    try:
        save_hf_folder([("w", torch.zeros(4))], str(base), str(tmp_path / "other"))
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "final_model" / "model.safetensors").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "other" / "model.safetensors").stat().st_mode) == 0o640
    assert out == str(tmp_path / "final_model")
