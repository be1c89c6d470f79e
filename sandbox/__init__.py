"""The jail, the working tree and the nine git and file tools."""
