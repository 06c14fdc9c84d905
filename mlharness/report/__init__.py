"""Reports over result directories: ``mlharness report`` (collect → render → HTML / Markdown / terminal)."""
