"""Acting copies of the learner's networks: numpy (workers need no torch) or torch for the large CNNs."""
