"""``python -m chorus``: the same command as ``chorus`` (for an environment whose scripts folder is not
on PATH, e.g. a notebook kernel's)."""
from chorus.cli import main

main()
