"""Learners: losses, advantage estimation and the update step of each algorithm."""
