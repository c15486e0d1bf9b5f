"""The docs site builds with warnings as errors, covers every page, and its link policy holds
(scripts/mkdocs_hooks.py: links resolve in the repository; none point outside it)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", REPO / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly_with_every_page_and_the_readme_as_home(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    for page in (REPO / "docs").glob("*.md"):
        assert (site / page.stem / "index.html").is_file(), f"{page.name} has no page on the site"
    home = (site / "index.html").read_text()
    assert "The two commands" in home and 'href="your-own-task/"' in home


def test_links_are_rewritten_for_the_site_and_broken_or_outside_ones_are_reported(tmp_path):
    rewrite_links = _hooks().rewrite_links
    repo, docs = tmp_path / "repo", tmp_path / "repo" / "docs"
    (repo / "bench").mkdir(parents=True)
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n")
    (repo / "bench" / "run.py").write_text("")
    (tmp_path / "outside.md").write_text("")
    page = ("[g](guide.md#guide) [r](../bench/run.py) [`bench/run.py`](../bench/run.py) "
            "[o](../../outside.md) [m](missing.md) [w](https://example.org/x) [a](#top)\n"
            "```\n[in code](../../outside.md)\n```")
    text, problems = rewrite_links(page, docs / "page.md", docs / "page.md", docs, repo)
    first_line = text.split("\n")[0]
    assert "[g](guide.md#guide)" in first_line
    assert "r (`bench/run.py`)" in first_line and " `bench/run.py` " in first_line
    assert "[w](https://example.org/x)" in first_line and "[a](#top)" in first_line
    assert "[in code](../../outside.md)" in text
    assert problems == ["link '../../outside.md' points outside the repository",
                        "link 'missing.md' points at docs/missing.md, which does not exist"]


def test_the_readme_as_home_page_links_into_docs_from_the_site_root(tmp_path):
    rewrite_links = _hooks().rewrite_links
    repo, docs = tmp_path, tmp_path / "docs"
    docs.mkdir()
    (docs / "lora.md").write_text("# LoRA\n")
    text, problems = rewrite_links("[LoRA](docs/lora.md#lora)", repo / "README.md", docs / "index.md", docs, repo)
    assert (text, problems) == ("[LoRA](lora.md#lora)", [])
