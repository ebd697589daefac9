"""Running a training job: building parts from the config, the loop, checkpoints, resume."""
