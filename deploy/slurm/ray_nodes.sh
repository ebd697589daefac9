# Ray on a SLURM allocation: the commands rlpar.sbatch runs on each node, kept here so that they
# can be run (and tested) without SLURM: tests/ray/test_deploy.py runs them on 127.0.0.1.
#
#   source deploy/slurm/ray_nodes.sh
#   ray_head IP                # the head node (blocks while the node lives)
#   ray_worker HEAD:PORT IP    # every other node (blocks while the node lives)
#   wait_for_nodes HEAD:PORT N # until N nodes are up (default timeout 300 s)
#   rlpar_train HEAD:PORT overrides...   # the run, as a driver on this node
#
# Authentication: Ray's token (RAY_AUTH_MODE=token). Every node reads the same token file, in the
# shared home directory (~/.ray/auth_token, made by `ray get-auth-token --generate`) or where
# RAY_AUTH_TOKEN_PATH points. Ports: the GCS on RAY_PORT, the rest pinned (RAY_*_PORT below) so
# that a firewall between nodes can open exactly these (docs/cluster.md).

: "${RAY_PORT:=6379}"
: "${RAY_NODE_MANAGER_PORT:=6380}"
: "${RAY_OBJECT_MANAGER_PORT:=6381}"
: "${RAY_RUNTIME_ENV_AGENT_PORT:=6382}"
: "${RAY_DASHBOARD_AGENT_GRPC_PORT:=6383}"
: "${RAY_DASHBOARD_AGENT_LISTEN_PORT:=6384}"
: "${RAY_METRICS_EXPORT_PORT:=6385}"
: "${RAY_MIN_WORKER_PORT:=10002}"
: "${RAY_MAX_WORKER_PORT:=10999}"
: "${RAY_TEMP_DIR:=/tmp/ray}"          # per node: each node's own local disk
: "${RLPAR_PYTHON:=python}"            # the Python of rlpar's environment (the same path on every node)
: "${RLPAR_MAIN:=main.py}"             # rlpar's main.py (or set RLPAR_CMD="rlpar train")
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
export RAY_USAGE_STATS_ENABLED=0

_ray_node_ports() {
  echo --node-manager-port="$RAY_NODE_MANAGER_PORT" --object-manager-port="$RAY_OBJECT_MANAGER_PORT" \
    --runtime-env-agent-port="$RAY_RUNTIME_ENV_AGENT_PORT" \
    --dashboard-agent-grpc-port="$RAY_DASHBOARD_AGENT_GRPC_PORT" \
    --dashboard-agent-listen-port="$RAY_DASHBOARD_AGENT_LISTEN_PORT" \
    --metrics-export-port="$RAY_METRICS_EXPORT_PORT" \
    --min-worker-port="$RAY_MIN_WORKER_PORT" --max-worker-port="$RAY_MAX_WORKER_PORT"
}

ray_head() {
  # shellcheck disable=SC2046
  exec "$RLPAR_PYTHON" -m ray.scripts.scripts start --head --node-ip-address="$1" --port="$RAY_PORT" \
    --num-cpus="${RAY_NUM_CPUS:-${SLURM_CPUS_PER_TASK:-1}}" --include-dashboard=false \
    --temp-dir="$RAY_TEMP_DIR" $(_ray_node_ports) --block
}

ray_worker() {
  # shellcheck disable=SC2046
  exec "$RLPAR_PYTHON" -m ray.scripts.scripts start --address="$1" --node-ip-address="$2" \
    --num-cpus="${RAY_NUM_CPUS:-${SLURM_CPUS_PER_TASK:-1}}" $(_ray_node_ports) --block
}

wait_for_nodes() {
  "$RLPAR_PYTHON" - "$1" "$2" "${3:-300}" <<'PY'
import sys, time
import ray
address, wanted, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + timeout
while (alive := sum(n["Alive"] for n in ray.nodes())) < wanted and time.monotonic() < deadline:
    time.sleep(1)
ray.shutdown()
print(f"{alive} of {wanted} Ray nodes up")
sys.exit(0 if alive >= wanted else 1)
PY
}

rlpar_train() {
  local address="$1"; shift
  ${RLPAR_CMD:-"$RLPAR_PYTHON" "$RLPAR_MAIN"} parallel=distributed hardware=cluster ray.address="$address" "$@"
}
