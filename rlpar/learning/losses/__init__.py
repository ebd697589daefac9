"""Loss pieces of each family (policy gradient, actor-critic, Q-learning, recurrent replay), each
testable on its own."""
