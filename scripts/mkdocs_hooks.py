"""MkDocs hooks for rlloom's docs site (`mkdocs.yml`): the README is the site's home page, and every
relative link in the README and in `docs/` is checked against the repository.

The link policy, one rule for the plain-Markdown view (a checkout, GitHub) and the site alike:

- a link is resolved against the file it is written in (`README.md` at the root, pages under `docs/`);
- a target inside `docs/` becomes a link between site pages (MkDocs then checks the page and its anchor);
- a target elsewhere in the repository (a script, an example folder) is shown on the site as its path in
  code type, since the site carries no copy of the source tree;
- a target that does not exist, or lies outside the repository, is a warning, which `mkdocs build
  --strict` turns into a failed build: the docs never point at files a user does not have.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

LOG = logging.getLogger("mkdocs.hooks.rlloom_links")
REPO_ROOT = Path(__file__).resolve().parent.parent
HOME_PAGE = "index.md"
LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def on_files(files, config):
    """Adds the repository's README.md as the site's home page."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, HOME_PAGE, content=readme))
    return files


def on_page_markdown(markdown, page, config, files):
    """Rewrites the page's relative links by the link policy and warns about the ones that break it."""
    docs_dir = Path(config["docs_dir"]).resolve()
    source = REPO_ROOT / "README.md" if page.file.src_uri == HOME_PAGE else docs_dir / page.file.src_uri
    site_location = docs_dir / page.file.src_uri
    rewritten, problems = rewrite_links(markdown, source, site_location, docs_dir, REPO_ROOT)
    for problem in problems:
        LOG.warning("%s: %s", source.relative_to(REPO_ROOT), problem)
    return rewritten


def rewrite_links(markdown: str, source: Path, site_location: Path, docs_dir: Path,
                  repo_root: Path) -> tuple[str, list[str]]:
    """The page's Markdown with relative links rewritten by the policy above, and one line per broken link.

    ``source`` is where the Markdown file lives in the repository (links resolve against it);
    ``site_location`` is where it sits in the site's source tree (links between pages start there).
    Fenced code blocks are left as written.
    """
    problems: list[str] = []

    def replace(match: re.Match) -> str:
        bang, text, target = match.groups()
        if EXTERNAL.match(target) or target.startswith("#"):
            return match.group(0)
        path_part, _, anchor = target.partition("#")
        resolved = Path(os.path.normpath(source.parent / path_part))
        if not resolved.is_relative_to(repo_root):
            problems.append(f"link {target!r} points outside the repository")
            return match.group(0)
        if not resolved.exists():
            problems.append(f"link {target!r} points at {resolved.relative_to(repo_root)}, which does not exist")
            return match.group(0)
        if resolved.is_relative_to(docs_dir):
            new_target = os.path.relpath(resolved, site_location.parent) + (f"#{anchor}" if anchor else "")
            return f"{bang}[{text}]({new_target})"
        shown = resolved.relative_to(repo_root).as_posix()
        return f"`{shown}`" if text.strip("` ") == shown else f"{text} (`{shown}`)"

    lines, in_fence = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
        lines.append(line if in_fence else LINK.sub(replace, line))
    return "\n".join(lines), problems
