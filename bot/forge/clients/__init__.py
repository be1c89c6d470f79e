"""The forge clients: the contract every forge implements (``contract``) and the built-in
clients (``github``)."""
