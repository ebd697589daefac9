"""Samplers: the same rollout worker run in-process, in subprocesses or on Ray actors."""
