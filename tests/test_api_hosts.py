"""Who the HTTP API answers: a Host header that is a name and a port, nothing that a URL parser would read as
127.0.0.1 ("evil.com@127.0.0.1"); and with a token, no request without it, a websocket's included."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from crag.api import create_app
from crag.config import Settings, host_name, load_settings
from crag.errors import ConfigError
from tests.apiclient import LOCAL, hash_embedder, make_client
from tests.fakes import chunk, pipeline

FORGED = [
    "evil.com@127.0.0.1",
    "127.0.0.1#@evil.com",
    "127.0.0.1:8000@evil.com",
    "evil.com#.127.0.0.1",
    "127.0.0.1/evil.com",
    "127.0.0.1?evil.com",
    "127.0.0.1 evil.com",
    "127.0.0.1\tevil.com",
    "localhost\\@evil.com",
    "[::1]@evil.com",
    "[::1",
    "127.0.0.1:80:80",
    "",
]


@pytest.mark.parametrize("host", FORGED)
def test_a_host_that_is_more_than_a_name_and_a_port_has_no_name(host: str) -> None:
    assert host_name(host) is None


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:8000", "127.0.0.1"),
        ("LocalHost:8000", "localhost"),
        ("[::1]:8000", "::1"),
        ("[0:0:0:0:0:0:0:1]", "::1"),
        ("kb.example.org:443", "kb.example.org"),
        (" kb.example.org ", "kb.example.org"),
    ],
)
def test_a_host_s_name(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize("host", [h for h in FORGED if h])
def test_a_forged_host_is_refused(settings: Settings, host: str) -> None:
    with make_client(settings) as client:
        refused = [
            client.get("/scopes", headers={"Host": host}),
            client.post("/ask", json={"question": "How many cores?"}, headers={"Host": host}),
            client.get("/v1/models", headers={"Host": host}),
        ]
    assert [r.status_code for r in refused] == [421, 421, 421], host


@pytest.mark.parametrize("host", ["kb.example.org@evil.com", "kb.example.org/x", "kb.example.org#x"])
def test_an_allowed_host_must_be_a_name(tmp_path, host: str) -> None:
    with pytest.raises(ConfigError, match="is not a host name"):
        load_settings(files_dir=tmp_path / "Files", chroma_dir=tmp_path / "db", allowed_hosts=host)


TOKEN = "s3cret-token"


def hello_app(settings: Settings):
    """The API with a websocket route of its own. None of the API's routes speaks websocket today; one that did (a
    server mounted behind it, a later route) would be open to any page or anyone without the token."""
    app = create_app(
        settings,
        pipeline_factory=lambda s: pipeline(s, [chunk("The widget needs two cores.")], [0.9]),
        embedder_factory=hash_embedder,
    )

    async def hello(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("hello")
        await websocket.close()

    app.add_api_websocket_route("/hello", hello)
    return app


def test_a_websocket_needs_the_token(settings: Settings) -> None:
    with TestClient(hello_app(settings.model_copy(update={"api_token": SecretStr(TOKEN)})), base_url=LOCAL) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect("/hello", headers=headers):
                pass
            assert refused.value.status_code == 401 and "CRAG_API_TOKEN" in refused.value.text
        with client.websocket_connect("/hello", headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
            assert ws.receive_text() == "hello"


def test_a_websocket_to_a_forged_host_is_refused(settings: Settings) -> None:
    with TestClient(hello_app(settings), base_url=LOCAL) as client:
        forged = {"Host": "evil.com@127.0.0.1"}
        with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect("/hello", headers=forged):
            pass
        assert refused.value.status_code == 421
        with client.websocket_connect("/hello", headers={"Host": "127.0.0.1:8000"}) as ws:
            assert ws.receive_text() == "hello"


def test_a_websocket_is_refused_before_its_handshake_where_no_response_can_be_sent() -> None:
    """A server without ASGI's websocket denial response gets a close (policy violation), not the handshake."""
    import anyio

    from crag.api.http import BearerAuth

    reached: list[str] = []

    async def app(scope, receive, send) -> None:
        reached.append(scope["type"])

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    scope = {"type": "websocket", "path": "/hello", "headers": [], "extensions": {}}
    anyio.run(BearerAuth(app, TOKEN), scope, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and not reached
    anyio.run(BearerAuth(app, TOKEN), {"type": "lifespan"}, receive, send)
    assert reached == ["lifespan"]
