"""Is the Ray cluster a config names reachable, and can this process join it? Checked before
anything starts."""

from __future__ import annotations

import socket

CONNECT_TIMEOUT_S = 1.5
START_CLUSTER_HINT = "start the cluster with `ray start --head` or check the address"


def ray_address_problem(address) -> str | None:
    """Why `address` (HOST:PORT, ray://HOST:PORT or auto) names no reachable cluster, or None."""
    if not isinstance(address, str):
        return f"expected HOST:PORT, ray://HOST:PORT or auto, got {address!r}"
    if address != "auto":
        return _address_problem(address) or _auth_problem(address)
    from rlpar.cluster.connection import auto_address, current_cluster_file

    found = auto_address()
    if found is None:
        return (
            "auto, but no running Ray cluster found on this machine (RAY_ADDRESS is unset, "
            f"no {current_cluster_file()}); start one with `ray start --head` or give ray.address=HOST:PORT"
        )
    address, source = found
    problem = _address_problem(address) or _auth_problem(address)
    return f"auto found {address} in {source}; {problem}" if problem else None


def _auth_problem(address: str) -> str | None:
    """A cluster that wants another authentication mode, or a token this process lacks."""
    from rlpar.cluster.auth import join_auth_problem

    return join_auth_problem(address)


def _address_problem(address: str) -> str | None:
    host_port = _host_and_port(address)
    if host_port is None:
        return f"'{address}' is not HOST:PORT, ray://HOST:PORT or auto"
    reason = _unreachable_reason(*host_port)
    if reason:
        return f"nothing answers at {address} ({reason}); {START_CLUSTER_HINT}"
    return None


def _host_and_port(address: str) -> tuple[str, int] | None:
    host, colon, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def _unreachable_reason(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except socket.gaierror:
        return "unknown host"
    except TimeoutError:
        return f"no answer within {CONNECT_TIMEOUT_S} s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as err:
        return err.strerror or type(err).__name__
