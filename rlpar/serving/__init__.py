"""A trained policy outside its training run: loaded with its preprocessing (`load_policy`),
exported to ONNX or TorchScript with it inside the graph (`rlpar export`), and served over HTTP
(`rlpar serve`). Nothing here trains, starts workers or Ray, or unpickles a run directory's files:
runs are read as `rlpar evaluate` reads them (rlpar.runtime.evaluate_run.load_run)."""
