"""The ``[run.ray]`` settings: the Ray executor's cluster and per-attempt resources (beside the rest of
the ``[run]`` section in config/run.py)."""

from __future__ import annotations

from pydantic import Field

from wedgewatch.config.section import Section


class RayConfig(Section):
    """The Ray executor (`run.executor = "ray"`, the `ray` extra; docs/scale-out.md)."""

    address: str | None = None
    """Unset: a local Ray started for the run and stopped after it. `auto` or an address
    (`host:6379`, `ray://host:10001`) joins a running cluster, which the run leaves running."""
    num_cpus: float = Field(1.0, gt=0)
    """CPUs each attempt's task declares: Ray schedules by it, it does not limit the agent."""
    memory_mb: int = Field(0, ge=0)
    """Memory each attempt's task declares, in MiB (Ray schedules by it); 0 declares none."""
    local_cpus: int | None = Field(None, ge=1)
    """CPUs of the local Ray the run starts (unset: Ray counts the machine's)."""
    object_store_mb: int = Field(256, ge=75)
    """Object store of the local Ray the run starts, in MiB. An attempt passes kilobytes (its
    job, its ending), so Ray's default (30% of memory) would only take shared memory away."""
    lost_worker_limit: int = Field(3, ge=1)
    """Attempts of one instance whose worker died (`interrupted`/`worker_lost`) in one execution
    before the run stops, aborted and resumable: a cluster that keeps losing workers is the
    cluster's problem, and an instance must not loop on it."""
    proxy_host: str = "127.0.0.1"
    """The interface the run's proxy binds when attempts run on Ray, and the host in the URL each
    attempt's agent is given. Loopback (the default) serves workers on this machine only; on a
    cluster of several hosts, an address of this machine that every worker node reaches. Beyond
    loopback the proxy takes an incoming key made for each execution, which only the run's agents
    are given: no open door."""
