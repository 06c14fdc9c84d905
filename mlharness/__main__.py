"""``python -m mlharness`` and the ``mlharness`` command's entry point: signals are handled, and the first line
printed, before the command's modules are imported (:mod:`mlharness.startup`): a Ctrl-C while it starts exits 130
with one line, and a run says what it is loading at once. A command that commits results runs in a supervised
child process (:mod:`mlharness.supervise`), so that a run ended by a hook or a crash never exits 0."""

from __future__ import annotations

import sys

from mlharness import startup, supervise


def main() -> None:
    """Run the command and exit with its status (the console script's own ``sys.exit`` is not reached)."""
    startup.guard()
    argv = sys.argv[1:]
    if not supervise.child():
        startup.announce(argv)
        if supervise.wanted(argv):
            status = supervise.supervise(argv)
            if status is not None:
                startup.leave(status)
    from mlharness.cli import main as command  # the command's modules: a second or more on a busy host

    startup.leave(supervise.finish(command))


if __name__ == "__main__":
    main()
