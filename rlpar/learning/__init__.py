"""What learners learn with: advantage estimation and batch preparation (estimators/), losses
(losses/), and optimisers and the gradient step (optimization/)."""
