"""What runs inside the sandbox container: the path jail, the working tree (pygit2), the
protected-ref policy, the nine tools and the tool server with its wire protocol. It
imports only ``bot.core`` (the image holds exactly what ``sandbox.inside.server``
imports), never ``sandbox.host``. This file imports nothing."""
