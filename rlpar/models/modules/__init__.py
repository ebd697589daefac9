"""The torch modules that learn (learner side): actor-critics, Q-networks, actors and critics,
encoders, recurrent cores."""
