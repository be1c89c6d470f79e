"""Riverbeam: a sandboxed, git-publishing docs bot."""
