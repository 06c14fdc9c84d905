"""``python -m mlharness`` and the ``mlharness`` command's entry point: signals are handled before the command's
modules are imported (:mod:`mlharness.startup`), so a Ctrl-C while it starts exits 130 with one line."""

from __future__ import annotations

import sys

from mlharness import startup


def main() -> int:
    startup.guard()
    from mlharness.cli import main as command  # the command's modules: a second or more on a busy host

    return command()


if __name__ == "__main__":
    sys.exit(main())
