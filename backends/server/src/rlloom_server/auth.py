"""``--api-key``: with a key set, every route but ``/health`` answers 401 unless the request carries
``Authorization: Bearer <key>`` (as SGLang's and OpenAI's servers and clients do)."""

from __future__ import annotations

import hmac

from aiohttp import web

OPEN_PATHS = frozenset({"/health"})


def api_key_middleware(key: str):
    """An aiohttp middleware that lets a request through when its path is open or its bearer token
    equals ``key`` (compared in constant time); else 401 naming the header."""
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def check(request: web.Request, handler):
        given = request.headers.get("Authorization", "").encode()
        if request.path in OPEN_PATHS or hmac.compare_digest(given, expected):
            return await handler(request)
        return web.json_response({"error": {"message": "missing or wrong API key: send the header "
                                            "'Authorization: Bearer <key>'", "code": 401}}, status=401)

    return check
