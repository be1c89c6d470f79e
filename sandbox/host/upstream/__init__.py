"""The upstream, seen from the worker host: the mirror cache fetched from it, the
credentials and SSH host keys libgit2 asks for. The least sandboxed code in Riverbeam:
it holds the upstream credentials the container never sees."""
