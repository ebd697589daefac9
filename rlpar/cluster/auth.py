"""Ray's authentication: required on the instances rlpar starts, found out on a cluster it joins.

A driver must use the authentication mode of the cluster it joins. Ray 2.60's `ray start`
requires a token by default, but older clusters and those started with RAY_AUTH_MODE=disabled
have none; a driver in token mode joins such a cluster, and its workers are never started
("Actor creation cancelled"). A token file on the machine says nothing about the cluster (any
earlier local run leaves ~/.ray/auth_token behind), so rlpar asks the cluster: one call to its
GCS without a token, which a cluster with token authentication answers UNAUTHENTICATED and
one without it answers. If it requires a token, a second call with the token this process would
send says whether it is the cluster's.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from rlpar.secret_files import SecretFileError, create_secret, read_secret

GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"  # cheap, and answered before any registration
PROBE_TIMEOUT_S = 5.0
TOKEN_HINT = "`ray get-auth-token` on the cluster's head node prints its token"

_state: dict = {"mode_set": None}  # the RAY_AUTH_MODE rlpar itself set last (not the user's choice)


class ClusterAuthError(RuntimeError):
    """The cluster's authentication and this process's settings disagree (one line, what to do)."""


def default_token_file() -> Path:
    """Where Ray reads a token when no variable names one, and where it writes a new one."""
    return Path.home() / ".ray" / "auth_token"


def token_file() -> Path:
    """The token file a Ray process started now would read (RAY_AUTH_TOKEN_PATH, if set, without
    falling back: Ray refuses to start when that file is missing or empty)."""
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or default_token_file())


def token_source() -> str | None:
    """Where a Ray process started now would read its auth token from (Ray's order), or None."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    return str(token_file()) if _token_in(token_file()) else None


def _token_in(path: Path) -> str | None:
    # Not private: `ray start` writes its token readable by all (0644), and refusing that file
    # would stop rlpar joining the very cluster it made the token for.
    return read_secret(path, what="Ray's auth token", private=False)


def _token() -> str | None:
    return os.environ.get("RAY_AUTH_TOKEN") or _token_in(token_file())


def require_token_auth(*, create_token: bool) -> str:
    """Token authentication for every Ray instance rlpar starts, also where a user's environment
    says RAY_AUTH_MODE=disabled: without it any local user (any host, were a port reachable)
    can run code as this one. Ray's nodes, workers and this driver read the mode from the
    environment; the token comes from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token,
    made (readable by this user only, written whole) where Ray reads it when `create_token` and
    none exists. Returns where."""
    set_auth_mode("token")
    if token_source() is None and create_token:
        create_secret(token_file(), secrets.token_hex(32))
    return token_source() or "nowhere (set RAY_AUTH_TOKEN)"


def set_auth_mode(mode: str) -> None:
    os.environ["RAY_AUTH_MODE"] = mode
    _state["mode_set"] = mode
    if "ray" in sys.modules:  # Ray caches its settings, RAY_AUTH_MODE included, once read
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]  # not in its stub

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def users_auth_mode() -> str | None:
    """RAY_AUTH_MODE as the user set it: None when unset, or when rlpar set it itself (e.g. for
    its private instance earlier in this process)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    return None if mode is None or mode == _state["mode_set"] else mode.strip().lower()


def gcs_target(address: str) -> str | None:
    """HOST:PORT of the GCS that `address` names; None for a Ray client address (ray://), which
    reaches a client server, not the GCS."""
    if address.startswith("ray://"):
        return None
    return address.split("://", 1)[-1].rstrip("/")


def join_auth_problem(address: str) -> str | None:
    """Why this process cannot join the cluster at `address` (HOST:PORT) with its authentication
    settings, or None (validation asks before anything starts)."""
    try:
        cluster_auth_mode(address)
    except ClusterAuthError as err:
        return str(err)
    return None


def cluster_auth_mode(address: str) -> str | None:
    """The RAY_AUTH_MODE this process must use to join the cluster at `address` ("token" or
    "disabled"; None for a ray:// address, left as it is). ClusterAuthError when the user's
    RAY_AUTH_MODE contradicts the cluster, or the cluster wants a token this process lacks."""
    target = gcs_target(address)
    if target is None:
        return None
    requires_token = _requires_token(target)
    chosen = users_auth_mode()
    if not requires_token:
        if chosen == "token":
            raise ClusterAuthError(
                f"the cluster at {address} runs without authentication, but RAY_AUTH_MODE=token is set: such a "
                f"cluster never starts the workers of a driver in token mode; unset RAY_AUTH_MODE (rlpar then "
                f"uses the cluster's mode) or set RAY_AUTH_MODE=disabled"
            )
        return "disabled"
    if chosen not in (None, "token"):
        raise ClusterAuthError(
            f"the cluster at {address} requires Ray's auth token, but RAY_AUTH_MODE={os.environ['RAY_AUTH_MODE']} "
            f"says to send none; unset RAY_AUTH_MODE (rlpar then sends the token) or set RAY_AUTH_MODE=token"
        )
    try:
        token = _token()
    except SecretFileError as err:
        raise ClusterAuthError(f"the cluster at {address} requires Ray's auth token, but {err}") from None
    if token is None:
        named = os.environ.get("RAY_AUTH_TOKEN_PATH")
        where = (
            f"RAY_AUTH_TOKEN_PATH names {named}, which is missing or empty"
            if named
            else f"RAY_AUTH_TOKEN is unset and {default_token_file()} is missing or empty"
        )
        raise ClusterAuthError(
            f"the cluster at {address} requires Ray's auth token, and none is found ({where}); set RAY_AUTH_TOKEN "
            f"to the cluster's token ({TOKEN_HINT}), or put it in that file"
        )
    if _call_gcs(target, token) == "UNAUTHENTICATED":
        raise ClusterAuthError(
            f"the cluster at {address} refused the auth token from {token_source()}: it was started with "
            f"another one; set RAY_AUTH_TOKEN to the cluster's token ({TOKEN_HINT})"
        )
    return "token"


def _requires_token(target: str) -> bool:
    status = _call_gcs(target, None)
    if status not in ("OK", "UNAUTHENTICATED"):
        raise ClusterAuthError(
            f"{target} does not answer as a Ray cluster's GCS ({status}); give the head node's GCS port "
            f"(`ray start --head --port=...`, 6379 by default)"
        )
    return status == "UNAUTHENTICATED"


def _call_gcs(target: str, token: str | None) -> str:
    """The gRPC status name of one GetClusterId call to the GCS at `target`, with `token` as a
    bearer token (or none). The empty request is sent as raw bytes: no Ray import needed."""
    import grpc

    options = [("grpc.enable_http_proxy", 0)]  # straight to the cluster, as Ray's own clients go
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        from ray._common.tls_utils import load_certs_from_env

        chain, key, ca = load_certs_from_env()
        credentials = grpc.ssl_channel_credentials(certificate_chain=chain, private_key=key, root_certificates=ca)
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    call = channel.unary_unary(GCS_METHOD, request_serializer=lambda _: b"", response_deserializer=lambda data: data)
    metadata = [("authorization", f"Bearer {token}")] if token is not None else None
    try:
        call(None, metadata=metadata, timeout=PROBE_TIMEOUT_S)
        return "OK"
    except grpc.RpcError as err:
        code = err.code()
        return code.name if code != grpc.StatusCode.UNAVAILABLE else f"UNAVAILABLE: {err.details()}"
    finally:
        channel.close()
