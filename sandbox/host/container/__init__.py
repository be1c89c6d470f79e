"""One hardened container per job, on the Docker engine: start it, talk to its tool server,
stop it, and reap the ones whose job is over. Host-side only; never imported in a container.
"""

from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.reaper import reap

__all__ = ["ContainerSandbox", "reap"]
