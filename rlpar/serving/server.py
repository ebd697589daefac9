"""`rlpar serve RUN_DIR`: a run's policy over HTTP, for simulators and services outside Python.

    GET  /     the policy: its spaces, its recurrent state, the run and checkpoint it came from
    POST /act  {"observation": OBS, "session": "id", "reset": false}  ->  {"action": ACTION}
               {"observations": [OBS, ...], "sessions": ["id", ...], "reset": [...]}  ->  {"actions": [...]}

Observations are JSON as the space holds them (numbers and lists, an object for a Dict space);
actions come back in the action space's terms (rlpar.serving.policy.Policy, the acting copy that
`rlpar evaluate` plays with, so the same episodes give the same actions). A recurrent policy keeps
one state per session, zero at its first request and again wherever a request says `reset` (an
episode's start); the least recently used of more than MAX_SESSIONS sessions are forgotten. A
multi-agent run serves each policy: `"policy": id` picks one (and `"agent"` the acting agent where
the run gave policies their agents' index).

The server is the standard library's ThreadingHTTPServer (keep-alive, no Nagle delay): a request
costs a few hundred microseconds beside the policy's own time (docs/benchmarks.md, "Serving a
policy"), so no third-party stack is needed. Only a loopback address is served without a token;
any other needs `--token`, checked on every request (`Authorization: Bearer TOKEN`).

Only the standard library is imported at the top: the command refuses a bad address at once.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import threading
from collections import OrderedDict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_SESSIONS = 10_000
MAX_REQUEST_BYTES = 32 * 1024 * 1024
TOKEN_VARIABLE = "RLPAR_SERVE_TOKEN"  # the token, kept out of the process list
SINGLE = ""  # the one policy of a single-agent run, among a multi-agent run's named ones


class RequestError(Exception):
    """A request the server refuses, with its HTTP status and one line saying why."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (127.0.0.0/8, ::1): reachable from
    this machine only. A name that does not resolve is not."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


class PolicyService:
    """What the server answers, apart from HTTP: actions for requests, and each session's
    recurrent state. One lock serialises acting (the acting copies are not thread-safe)."""

    def __init__(self, policies: dict[str, Any]):
        self.policies = policies
        self.sessions: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.lock = threading.Lock()

    def describe(self) -> dict:
        described = {name: policy.describe() for name, policy in self.policies.items()}
        endpoints = {
            "GET /": "this description",
            "POST /act": '{"observation": OBS, "session": ID, "reset": BOOL} -> {"action": ACTION}; '
            '{"observations": [OBS, ...], "sessions": [ID, ...], "reset": [BOOL, ...]} -> {"actions": [...]}',
        }
        if set(described) == {SINGLE}:
            return {**described[SINGLE], "endpoints": endpoints}
        return {"policies": described, "endpoints": endpoints}

    def act(self, request: Any) -> dict:
        from gymnasium.vector.utils import concatenate, create_empty_array

        from rlpar.serving.space_json import observation_from_json

        if not isinstance(request, dict):
            raise RequestError("expected a JSON object")
        policy = self._policy(request.get("policy"))
        batch = "observations" in request
        if batch == ("observation" in request):
            raise RequestError('give "observation" (one) or "observations" (a list)')
        items = request["observations"] if batch else [request["observation"]]
        if not isinstance(items, list) or not items:
            raise RequestError('"observations": expected a non-empty list')
        sessions = self._per_row(request, "sessions" if batch else "session", batch, len(items), None)
        resets = self._per_row(request, "reset", batch, len(items), False)
        space = policy.observation_space
        try:
            observations = [observation_from_json(space, item) for item in items]
            empty: Any = create_empty_array(space, len(items))
            stacked = concatenate(space, observations, empty)
        except ValueError as err:
            raise RequestError(f"observation: {err}") from None
        with self.lock:
            state = self._states(policy, sessions, resets)
            try:
                actions, state = policy.act(stacked, state, agent=request.get("agent"))
            except ValueError as err:
                raise RequestError(str(err)) from None
            self._keep(policy, sessions, state)
        answer = actions.tolist()
        return {"actions": answer} if batch else {"action": answer[0]}

    def _policy(self, name):
        if name is None and len(self.policies) == 1:
            return next(iter(self.policies.values()))
        if name not in self.policies:
            raise RequestError(f'"policy": expected one of {sorted(self.policies)}, got {name!r}')
        return self.policies[name]

    @staticmethod
    def _per_row(request: dict, key: str, batch: bool, rows: int, default) -> list:
        """A request's value for each of its rows: one for all, or in a batch a list of one per row."""
        value = request.get(key, default)
        if batch and isinstance(value, list):
            if len(value) != rows:
                raise RequestError(f'"{key}": expected {rows} values, one per observation, got {len(value)}')
            return value
        return [value] * rows

    def _states(self, policy, sessions: list, resets: list):
        """The recurrent state entering this step for each row (None: feed-forward)."""
        if not policy.state_size:
            return None
        import numpy as np

        if any(session is None for session in sessions):
            raise RequestError('a recurrent policy keeps its state per session: give "session" (or "sessions")')
        if len(set(sessions)) < len(sessions):
            raise RequestError('"sessions": each row of a batch needs its own session')
        state = np.zeros((len(sessions), policy.state_size))
        for row, (session, reset) in enumerate(zip(sessions, resets)):
            kept = self.sessions.get((policy.policy_id or "", str(session)))
            if kept is not None and not reset:
                state[row] = kept
        return state

    def _keep(self, policy, sessions: list, state) -> None:
        if state is None:
            return
        for session, row in zip(sessions, state):
            key = (policy.policy_id or "", str(session))
            self.sessions[key] = row
            self.sessions.move_to_end(key)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)


class PolicyRequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, JSON in and out; every answer carries its length."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a small answer goes out at once, not after the client's delayed ACK
    server: PolicyServer

    def do_GET(self) -> None:
        if self._authorised():
            if self.path.split("?")[0] == "/":
                self._answer(HTTPStatus.OK, self.server.service.describe())
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}: GET / or POST /act"})

    def do_POST(self) -> None:
        if not self._authorised():
            return
        if self.path.split("?")[0] != "/act":
            self._discard_body()
            self._answer(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}: POST /act or GET /"})
            return
        try:
            request = self._json_body()
            self._answer(HTTPStatus.OK, self.server.service.act(request))
        except RequestError as err:
            self._answer(err.status, {"error": str(err)})

    def _authorised(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
        self._discard_body()
        self._answer(HTTPStatus.UNAUTHORIZED, {"error": "this server needs its token: Authorization: Bearer TOKEN"})
        return False

    def _length(self) -> int:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError("a request needs its Content-Length", HTTPStatus.LENGTH_REQUIRED) from None
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True  # its body is not read
            raise RequestError(f"requests are at most {MAX_REQUEST_BYTES:,} bytes", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        return length

    def _discard_body(self) -> None:
        """Read an unanswered request's body (if it has one), so the connection stays in step for
        the next request; one too large to read ends the connection."""
        if "Content-Length" not in self.headers:
            return
        try:
            self.rfile.read(self._length())
        except RequestError:
            self.close_connection = True

    def _json_body(self) -> Any:
        body = self.rfile.read(self._length())
        try:
            return json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RequestError(f"the body is not JSON ({err})") from None

    def _answer(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        """Quiet: a request per simulator step would flood the terminal."""


class PolicyServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer holding the service and the token its handler checks."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: PolicyService, token: str | None):
        host = address[0]
        if ":" in host:  # an IPv6 address
            self.address_family = socket.AF_INET6
        super().__init__(address, PolicyRequestHandler)
        self.host = host
        self.service = service
        self.token = token

    @property
    def url(self) -> str:
        """Where clients reach it (the port chosen, for port 0)."""
        return f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.server_address[1]}"


def make_server(loaded, host: str, port: int, token: str | None) -> PolicyServer:
    """A server of `loaded` (a Policy, or {policy id: Policy}) bound to host:port (0: a free port)."""
    policies = loaded if isinstance(loaded, dict) else {SINGLE: loaded}
    return PolicyServer((host, port), PolicyService(policies), token)
