"""``python -m mlharness`` and the ``mlharness`` command's entry point: signals are handled, and the first line
printed, before the command's modules are imported (:mod:`mlharness.startup`): a Ctrl-C while it starts exits 130
with one line, and a run says what it is loading at once."""

from __future__ import annotations

import sys

from mlharness import startup


def main() -> None:
    """Run the command and exit with its status (the console script's own ``sys.exit`` is not reached)."""
    startup.guard()
    startup.announce(sys.argv[1:])
    from mlharness.cli import main as command  # the command's modules: a second or more on a busy host

    startup.leave(command())


if __name__ == "__main__":
    main()
