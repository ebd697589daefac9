"""What a batch becomes before a loss sees it: advantages and returns (GAE, n-step, V-trace),
rewards, tensors, sequences."""
