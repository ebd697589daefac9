"""Failures of the Ray instance itself (importable without Ray, for main.py)."""

from __future__ import annotations


class RayInstanceLostError(RuntimeError):
    """The private Ray instance lost its GCS or raylet: no runner can be reached or started on it
    again, and no node can join a private instance to take over."""


class RayHeadLostError(RayInstanceLostError):
    """The head of the cluster the run joined stopped answering: the driver's Ray cannot go on
    (Ray's core worker would abort it a minute later), and its runners report to nobody."""
