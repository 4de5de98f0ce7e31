"""`python -m runonce`: the same command line as the `runonce` script."""

from runonce.cli import main

main()
