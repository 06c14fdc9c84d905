"""Chat prompts with images: the chat input (``input.py``)."""
