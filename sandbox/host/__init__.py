"""The host side of the sandbox: the Docker engine, the job containers and their image,
per-job workspaces, the upstream (mirrors, credentials, SSH host keys) and the push
relay. This code runs on the worker host and holds credentials; nothing here is ever
imported inside a container (``sandbox.inside.server`` and what it imports are)."""
