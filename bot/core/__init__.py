"""Riverbeam's shared vocabulary: errors and their BEM codes, the tool and agent
contracts, an agent's input, frames, and who commits. A leaf: nothing here imports
another Riverbeam module, so every layer (and the sandbox container) may import it.
This file imports nothing, so importing one of these modules loads only that one."""
