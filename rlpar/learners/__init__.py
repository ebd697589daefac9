"""Where gradients are made when one process is not enough: a data-parallel group of learners
(docs/learners.md). `learners=1` never imports this package."""
