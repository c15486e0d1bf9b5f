"""A black-box agent program for the gateway tests, told what to do by its row's ``extra["script"]``:

- ``calls``: one chat completion (the ``openai`` client) per entry of ``extra["calls"]``
  (``{"messages", "via": "path" | "header", "stream": bool}``; ``{k}`` in a message's content is answer
  ``k``'s text),
  asking for the token ids; writes the answers (``content``, ``token_ids``, ``prompt_token_ids``) as
  JSON to ``extra["out"]``; posts ``extra["reward"]`` when there is one; exits 0;
- ``fail``: writes two lines to stderr, exits 3;
- ``hang``: starts a child that sleeps, writes both pids to ``extra["out"]``, sleeps;
- ``wait``: exits 0 once the file ``extra["go"]`` exists;
- ``count``: puts a file of its own in the folder ``extra["folder"]``, sleeps a little, writes how many
  files the folder holds to ``extra["out"]``, removes its file, exits 0.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

import openai


def chat_calls(extra: dict) -> None:
    base = os.environ["OPENAI_BASE_URL"]
    episode = base.split("/episodes/")[1].split("/")[0]
    by_path = openai.OpenAI(max_retries=0)
    by_header = openai.OpenAI(base_url=base.split("/episodes/")[0] + "/v1", max_retries=0,
                              default_headers={"X-Rlloom-Episode": episode})
    answers = []
    for call in extra["calls"]:
        texts = [answer["content"] for answer in answers]
        messages = [{**m, "content": m["content"].format(*texts)} for m in call["messages"]]
        client = by_header if call["via"] == "header" else by_path
        answer = client.chat.completions.create(model="policy", messages=messages, stream=call.get("stream", False),
                                                extra_body={"return_token_ids": True})
        if call.get("stream"):
            (choice,) = [chunk.choices[0] for chunk in answer]
            message = choice.delta
        else:
            choice = answer.choices[0]
            message = choice.message
        answers.append({"content": message.content, "token_ids": choice.token_ids,
                        "prompt_token_ids": choice.prompt_token_ids})
    pathlib.Path(extra["out"]).write_text(json.dumps(answers))
    if "reward" in extra:
        body = json.dumps({"reward": extra["reward"], "parts": {"posted": extra["reward"]}}).encode()
        urllib.request.urlopen(urllib.request.Request(base.removesuffix("/v1") + "/reward", data=body), timeout=60)


def main() -> None:
    extra = json.loads(os.environ["RLLOOM_EPISODE"])["extra"]
    script = extra["script"]
    if script == "calls":
        chat_calls(extra)
    elif script == "fail":
        print("starting\nagent broke: no luck", file=sys.stderr)
        sys.exit(3)
    elif script == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        pathlib.Path(extra["out"]).write_text(json.dumps([os.getpid(), child.pid]))
        time.sleep(3600)
    elif script == "wait":
        while not os.path.exists(extra["go"]):
            time.sleep(0.05)
    elif script == "count":
        mine = pathlib.Path(extra["folder"]) / str(os.getpid())
        mine.touch()
        time.sleep(0.2)
        pathlib.Path(extra["out"]).write_text(str(len(list(mine.parent.iterdir()))))
        mine.unlink()


if __name__ == "__main__":
    main()
