"""Model clients: the boundary between the tool loop and a language model."""
