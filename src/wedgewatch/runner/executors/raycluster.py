"""Starting or joining the Ray cluster a run's attempts go to, and leaving it.

Without ``run.ray.address`` the run starts a local Ray (a head node on this machine: GCS, raylet,
workers) and stops it after the run; with one it joins a running cluster and leaves it running.
Either way it is one blocking ``ray.init``, run in a thread of its own that outlives it: Ray
starts its local processes with PR_SET_PDEATHSIG, which fires when the *thread* that forked them
ends, and ``ray.init`` in the loop's thread would replace the run's SIGTERM handler with its own.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import logging
import os
import socket
from typing import Any

from wedgewatch.base.errors import ExecutorError
from wedgewatch.config.ray import RayConfig

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# Seconds a local Ray's start-up may take at each of its waits that Ray lets us lengthen (the GCS
# writing its port, a driver connecting to it). Ray's default, 30 s, was seen to run out on a
# loaded 2-core machine; waiting longer costs nothing when it starts in 10.
START_WAIT = 120

# Where a local Ray keeps its logs (the session directory of the latest start).
LOCAL_LOGS = "/tmp/ray/session_latest/logs"


# Ray sends its token to an address given explicitly only when told to, and says only "Failed to
# connect" when the cluster refuses a driver without it.
AUTH_HINT = (
    " (a cluster with token authentication needs RAY_AUTH_MODE=token and its token, in "
    "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, in the runner's environment)"
)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except OSError:
        return False  # unresolvable: the proxy will say so when it binds


class _Quiet(logging.Filter):
    """Drop ray.init's warning that it set no SIGTERM handler off the main thread: that is the
    point of calling it there (the run's own handler stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


class Cluster:
    """One run's connection to Ray: ``open`` starts or joins, ``close`` stops or leaves."""

    def __init__(self, settings: RayConfig) -> None:
        self.settings = settings
        # The one thread that calls ray.init and ray.shutdown; it lives until the local Ray is
        # stopped (see the module's docstring).
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wedgewatch-ray")
        self.opened = False

    @property
    def local(self) -> bool:
        return self.settings.address is None

    def describe(self) -> str:
        return "a local Ray" if self.local else f"the Ray cluster at {self.settings.address}"

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
        return self._thread.submit(fn, *args)

    def open(self) -> None:
        """Start or join (blocking; in ``_thread``). ExecutorError naming what failed."""
        import ray

        if ray.is_initialized():
            raise ExecutorError(
                'run.executor = "ray": Ray is already initialised in this process (one run on Ray '
                "per process: the run starts or joins its own cluster and leaves it afterwards)"
            )
        s = self.settings
        kwargs: dict[str, Any] = {
            "include_dashboard": False,  # a web server nobody asked for, and a second of CPU
            "log_to_driver": False,  # workers' output stays in Ray's logs, off the run's stderr
            "logging_level": logging.WARNING,
        }
        # Ray reads these from the environment; the user's own settings win.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if self.local:
            os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(START_WAIT))
            kwargs.update(
                # "local": a new Ray of the run's own, even when RAY_ADDRESS or a `ray start` on
                # this machine (its /tmp/ray/ray_current_cluster, stale or not) names another.
                address="local",
                num_cpus=s.local_cpus,
                num_gpus=0,
                object_store_memory=s.object_store_mb * MIB,
            )
        else:
            kwargs["address"] = s.address
        quiet = _Quiet()
        logging.getLogger("ray._private.worker").addFilter(quiet)
        try:
            ray.init(**kwargs)
        except BaseException as exc:
            try:
                ray.shutdown()  # whatever half started must not outlive the failure
            except Exception:
                log.exception("stopping a half-started Ray failed")
            where = f"; Ray's logs: {LOCAL_LOGS}" if self.local else AUTH_HINT
            raise ExecutorError(
                f'run.executor = "ray": {"starting" if self.local else "joining"} {self.describe()} '
                f"failed: {type(exc).__name__}: {str(exc)[:1000]}{where}"
            ) from exc
        finally:
            logging.getLogger("ray._private.worker").removeFilter(quiet)
        self.opened = True
        log.info("attempts run on %s (%s)", self.describe(), ray.cluster_resources())
        self._check_reach(ray)

    def _check_reach(self, ray: Any) -> None:
        """Say so when worker nodes on other hosts are given a proxy on loopback: every attempt
        they ran would fail to connect, an api_error after another."""
        if not _is_loopback(self.settings.proxy_host):
            return
        here = ray.util.get_node_ip_address()
        others = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} - {here})
        if others:
            log.warning(
                "run.ray.proxy_host is %s, which nodes %s cannot reach: set it to an address of "
                "this machine they reach (docs/scale-out.md)",
                self.settings.proxy_host,
                ", ".join(others),
            )

    def close(self) -> None:
        """Stop the local Ray (every process it started) or leave the cluster (blocking)."""
        import ray

        if self.opened:
            self.opened = False
            ray.shutdown()

    def release(self) -> None:
        """Let the Ray thread go, once nothing of the local Ray is left to outlive it."""
        self._thread.shutdown(wait=False)
