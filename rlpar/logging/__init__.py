"""Where metrics go: metrics.jsonl, TensorBoard, optionally W&B, and the console."""
