"""Ray below the samplers: the private loopback instance, joining a cluster, a local test cluster."""
