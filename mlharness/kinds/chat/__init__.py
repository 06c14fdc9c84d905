"""Chat prompts with images: the chat input (``input.py``) and its row (``kind.py``); the error a sample's messages
raise, which the token SUT tells apart from a failed run."""

from mlharness.errors import HookError


class BadChatInput(HookError):
    """A sample's chat messages that cannot be a prompt: the user's input (exit status 2), also when LoadGen's
    load callback meets it mid-run (the token SUT raises it as it is rather than as a failed run)."""
