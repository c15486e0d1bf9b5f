"""Server-sent events, as SGLang's and OpenAI's streaming answers send them: each event one
``data: <JSON>`` line and a blank line, the stream ended by ``data: [DONE]``."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def send_events(request: web.Request, events: list[Any]) -> web.StreamResponse:
    """Stream ``events`` (JSON values) to the caller of ``request``, then ``data: [DONE]``; a caller
    that hangs up mid-stream ends it (nothing is left to send it)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        for event in events:
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response
