"""Failures of the Ray instance itself (importable without Ray, for main.py)."""

from __future__ import annotations


class RayInstanceLostError(RuntimeError):
    """The private Ray instance lost its GCS or raylet: no runner can be reached or started on it
    again, and no node can join a private instance to take over."""
